//! Promise 2 with a real process and a real `kill -9`: nothing an append
//! acknowledged under `fsync = "always"` is lost, nothing unacknowledged comes
//! back corrupt, and sequence numbers and cursors stay honest across crashes.
//!
//! The test re-runs its own binary as the child (only `child_entry`, switched
//! on by `HOLDFAST_CRASH_CHILD`). The child appends from several tasks and
//! prints one line per acknowledged append; a consumer in it reads, checks and
//! commits. The parent SIGKILLs the child after a random number of
//! acknowledgements (plus a small random delay), reopens the log in-process
//! and checks every event against what was acknowledged. Then the next cycle
//! runs on the same directory, so the log and its history grow.
//!
//! Events describe themselves, so anything found in the log can be checked
//! whether or not its acknowledgement was printed before the kill:
//!
//! ```text
//!   0  4  cycle
//!   4  4  writer         (MARKER_WRITER for the parent's own appends)
//!   8  8  counter        0, 1, 2, ... per (cycle, writer)
//!  16  …  filler         bytes derived from (cycle, writer, counter)
//!   …  4  CRC-32 of everything before it
//! ```
//!
//! Child stdout protocol, one line per event, each written whole:
//!
//! * `ACK <cycle> <writer> <first counter> <start> <end>` — an append returned.
//! * `COMMIT <seq>` — the consumer is about to commit `seq` (an upper bound).
//! * `SYNCED <seq>` — cursors holding at least `seq` were synced (a lower bound).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions, StartAt, WhenFull};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "HOLDFAST_CRASH_CHILD";
const CYCLE_ENV: &str = "HOLDFAST_CRASH_CYCLE";
const CYCLES: u32 = 32;
const WRITERS: u32 = 4;
const MARKER_WRITER: u32 = u32::MAX;
const SEGMENT_BYTES: u64 = 256 << 10;
/// The parent's reader; it never commits, so no segment is ever deleted and
/// every cycle re-checks the whole history.
const AUDIT: &str = "audit";
/// The child's consumer, whose cursor is checked against its commits.
const CHILD_CONSUMER: &str = "child";

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT_BYTES,
        max_bytes: 4 << 30,
        fsync: FsyncPolicy::Always,
        when_full: WhenFull::Block,
        // Short, so that cursors reach disk several times per child run.
        cursor_sync_interval: Duration::from_millis(20),
        ..LogOptions::default()
    }
}

// ---------------------------------------------------------------------------
// Events

fn mix(mut x: u64) -> u64 {
    // splitmix64 finalizer: cheap, deterministic, well spread.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn seed(cycle: u32, writer: u32, counter: u64) -> u64 {
    mix(((cycle as u64) << 32 | writer as u64) ^ mix(counter))
}

/// The event with this identity; its length varies from 20 to about 420 bytes.
fn event(cycle: u32, writer: u32, counter: u64) -> Vec<u8> {
    let s = seed(cycle, writer, counter);
    let filler = (s % 400) as usize;
    let mut e = Vec::with_capacity(16 + filler + 4);
    e.extend_from_slice(&cycle.to_le_bytes());
    e.extend_from_slice(&writer.to_le_bytes());
    e.extend_from_slice(&counter.to_le_bytes());
    let word = s.to_le_bytes();
    e.extend((0..filler).map(|i| word[i % 8].wrapping_add((i / 8) as u8)));
    let crc = crc32fast::hash(&e);
    e.extend_from_slice(&crc.to_le_bytes());
    e
}

/// Checks an event's own CRC and returns its identity.
fn identify(data: &[u8]) -> Result<(u32, u32, u64), String> {
    if data.len() < 20 {
        return Err(format!("event of {} bytes is too short", data.len()));
    }
    let (body, crc) = data.split_at(data.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
        return Err("event checksum mismatch".into());
    }
    Ok((
        u32::from_le_bytes(body[0..4].try_into().unwrap()),
        u32::from_le_bytes(body[4..8].try_into().unwrap()),
        u64::from_le_bytes(body[8..16].try_into().unwrap()),
    ))
}

// ---------------------------------------------------------------------------
// The child

/// Runs only in the child process; a no-op as a normal test.
#[test]
fn child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let cycle: u32 = std::env::var(CYCLE_ENV).unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(child(PathBuf::from(dir), cycle));
}

fn say(line: std::fmt::Arguments<'_>) {
    // One write per line: a line is either whole in the pipe or absent.
    let text = format!("{line}\n");
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

async fn child(dir: PathBuf, cycle: u32) {
    // libtest has printed "test child_entry ... " without a newline: give it
    // a line of its own, or the first ACK or COMMIT would be glued to it and
    // missed by the parent (a missed COMMIT made the cursor check fail).
    say(format_args!("START {cycle}"));
    let log = Log::open(&dir, options()).expect("child: open");
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::from_os_rng();
            let mut counter = 0u64;
            loop {
                // Mostly small batches, sometimes large ones so that groups
                // span many pages and segments roll within a cycle.
                let n = if rng.random_bool(0.1) {
                    rng.random_range(100..400)
                } else {
                    rng.random_range(1..40)
                };
                let mut batch = Batch::new();
                for i in 0..n {
                    batch.push(&event(cycle, writer, counter + i));
                }
                let r = log.append(batch).await.expect("child: append");
                assert_eq!(r.len(), n, "child: range length");
                say(format_args!(
                    "ACK {cycle} {writer} {counter} {} {}",
                    r.start, r.end
                ));
                counter += n;
            }
        }));
    }
    let consumer_log = log.clone();
    tasks.push(tokio::spawn(async move {
        let log = consumer_log;
        let mut c = log
            .consumer(CHILD_CONSUMER, StartAt::Oldest)
            .expect("child: consumer");
        let mut rng = StdRng::from_os_rng();
        let mut expect = c.position();
        loop {
            let events = c.read_wait(500, 1 << 20).await.expect("child: read");
            for e in &events {
                assert_eq!(e.seq, expect, "child: consumer skipped or repeated");
                expect += 1;
                identify(&e.data).expect("child: consumer read a bad event");
            }
            if rng.random_bool(0.3) {
                let to = expect - rng.random_range(0..=events.len() as u64);
                say(format_args!("COMMIT {to}"));
                c.commit(to).expect("child: commit");
                if rng.random_bool(0.2) {
                    log.sync_cursors().await.expect("child: sync cursors");
                    say(format_args!("SYNCED {to}"));
                }
            }
        }
    }));
    // Never reached in a normal run: the parent kills us long before.
    tokio::time::sleep(Duration::from_secs(60)).await;
    panic!("child: not killed within 60 s");
}

// ---------------------------------------------------------------------------
// The parent

/// An acknowledged append: `start..end` holds counters `first..` of `(cycle, writer)`.
#[derive(Debug, Clone, Copy)]
struct Ack {
    cycle: u32,
    writer: u32,
    first: u64,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct History {
    /// Every acknowledged append of every cycle, by start.
    acks: Vec<Ack>,
    /// Highest commit the child ever attempted: the cursor may not exceed it.
    max_commit: u64,
    /// Highest commit known to be synced: the cursor may not fall below it.
    min_durable_commit: u64,
    torn_tails: u64,
    torn_bytes: u64,
    damaged_cursor_files: u64,
}

struct ChildRun {
    lines: Vec<String>,
    acks_at_kill: usize,
}

#[test]
fn kill9_never_loses_acknowledged_appends() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let mut history = History::default();
    let mut rng = rand::rng();

    // Register the audit consumer before any child runs.
    {
        let log = Log::open(&dir, options()).unwrap();
        log.consumer(AUDIT, StartAt::Oldest).unwrap();
        log.close_blocking().unwrap();
    }
    let mut next_seq = 0;
    for cycle in 0..CYCLES {
        let target = rng.random_range(10..150);
        let run = run_child(&dir, cycle, target, &mut rng);
        let before = history.acks.len();
        for line in &run.lines {
            let mut w = line.split_whitespace();
            match w.next() {
                Some("ACK") => {
                    let v: Vec<u64> = w.map(|x| x.parse().unwrap()).collect();
                    let ack = Ack {
                        cycle: v[0] as u32,
                        writer: v[1] as u32,
                        first: v[2],
                        start: v[3],
                        end: v[4],
                    };
                    assert_eq!(ack.cycle, cycle);
                    assert!(
                        ack.start >= next_seq,
                        "cycle {cycle}: acknowledged range {}..{} reuses sequence numbers below {next_seq}, \
                         the end of the log before this child started",
                        ack.start,
                        ack.end
                    );
                    history.acks.push(ack);
                }
                Some("COMMIT") => {
                    let s: u64 = w.next().unwrap().parse().unwrap();
                    history.max_commit = history.max_commit.max(s);
                }
                Some("SYNCED") => {
                    let s: u64 = w.next().unwrap().parse().unwrap();
                    history.min_durable_commit = history.min_durable_commit.max(s);
                }
                _ => {}
            }
        }
        let acked = history.acks.len() - before;
        assert!(acked >= run.acks_at_kill);
        next_seq = check_after_crash(&dir, cycle, &mut history);
        eprintln!(
            "cycle {cycle:2}: killed after {acked:3} acknowledged appends (trigger {target}); \
             log now ends at {next_seq} ({:.1} s so far)",
            started.elapsed().as_secs_f64()
        );
    }
    let bytes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    eprintln!(
        "{CYCLES} kill -9 cycles in {:.1} s: {} acknowledged appends, {} events, {:.1} MiB on disk, \
         {} torn tails truncated ({} bytes), {} damaged cursor slots; child consumer committed up to {} \
         (synced at least {})",
        started.elapsed().as_secs_f64(),
        history.acks.len(),
        next_seq,
        bytes as f64 / (1 << 20) as f64,
        history.torn_tails,
        history.torn_bytes,
        history.damaged_cursor_files,
        history.max_commit,
        history.min_durable_commit,
    );
}

/// Starts the child, lets it run until `target` acknowledgements (plus a
/// little), SIGKILLs it and returns every whole line it printed.
fn run_child(dir: &Path, cycle: u32, target: usize, rng: &mut impl Rng) -> ChildRun {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(CYCLE_ENV, cycle.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        // A line without its newline was cut by the kill: not acknowledged.
        while r.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
            if line.starts_with("ACK ") {
                let _ = tx.send(());
            }
            lines.push(std::mem::take(&mut line));
        }
        lines
    });
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut acks = 0;
    while acks < target {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => acks += 1,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(e) => fail_child(
                &mut child,
                reader,
                errors,
                &format!("{e:?} after {acks} acks"),
            ),
        }
    }
    // A little more, so the kill lands at any point of a group commit:
    // mid-write, mid-sync, between sync and acknowledgement, mid-roll.
    std::thread::sleep(Duration::from_micros(rng.random_range(0..3000)));
    if child.try_wait().unwrap().is_some() {
        fail_child(&mut child, reader, errors, "exited before the kill");
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "child was not killed by SIGKILL: {status:?}"
    );
    let lines = reader.join().unwrap();
    let _ = errors.join();
    ChildRun {
        lines,
        acks_at_kill: acks,
    }
}

fn fail_child(
    child: &mut Child,
    reader: std::thread::JoinHandle<Vec<String>>,
    errors: std::thread::JoinHandle<String>,
    what: &str,
) -> ! {
    let _ = child.kill();
    let status = child.wait();
    let out = reader.join().unwrap_or_default();
    let err = errors.join().unwrap_or_default();
    let tail: Vec<&String> = out.iter().rev().take(20).collect();
    panic!("child failed ({what}); status {status:?}\nlast stdout lines: {tail:?}\nstderr:\n{err}");
}

/// Reopens the log after a kill and checks it against the history. Returns
/// the end of the log (after the parent's own marker append).
fn check_after_crash(dir: &Path, cycle: u32, h: &mut History) -> u64 {
    let log = Log::open(dir, options()).unwrap_or_else(|e| panic!("cycle {cycle}: reopen: {e}"));
    let stats = log.stats();
    let c = &stats.counters;
    assert_eq!(c.corrupt_frames, 0, "cycle {cycle}: corrupt frames at open");
    assert_eq!(
        c.corrupt_headers, 0,
        "cycle {cycle}: corrupt segment headers"
    );
    assert!(
        c.torn_tails <= 1,
        "cycle {cycle}: {} torn tails",
        c.torn_tails
    );
    h.torn_tails += c.torn_tails;
    h.torn_bytes += c.torn_bytes;
    h.damaged_cursor_files += c.damaged_cursor_files;
    let end = stats.next_seq;
    let max_acked = h.acks.iter().map(|a| a.end).max().unwrap_or(0);
    assert!(
        end >= max_acked,
        "cycle {cycle}: the log ends at {end} but {max_acked} was acknowledged"
    );
    assert_eq!(stats.first_seq, 0, "cycle {cycle}: a segment was deleted");

    // The child's cursor: at or above what it synced, at or below what it
    // committed, never past the durable end.
    if let Some(cs) = stats.consumers.iter().find(|c| c.name == CHILD_CONSUMER) {
        assert!(
            cs.committed <= h.max_commit,
            "cycle {cycle}: cursor {} is ahead of the highest commit {}",
            cs.committed,
            h.max_commit
        );
        assert!(
            cs.committed >= h.min_durable_commit,
            "cycle {cycle}: cursor {} fell behind the synced commit {}",
            cs.committed,
            h.min_durable_commit
        );
        assert!(cs.committed <= end, "cycle {cycle}: cursor past the end");
    }

    // Sequence numbers continue without reuse, also right after a torn tail.
    let mut marker = Batch::new();
    marker.push(&event(cycle, MARKER_WRITER, 0));
    let r = log.append_blocking(marker).unwrap();
    assert_eq!((r.start, r.end), (end, end + 1), "cycle {cycle}: marker");
    h.acks.push(Ack {
        cycle,
        writer: MARKER_WRITER,
        first: 0,
        start: r.start,
        end: r.end,
    });
    h.acks.sort_by_key(|a| a.start);

    // Read the whole history and check every event.
    let mut audit = log.consumer(AUDIT, StartAt::Oldest).unwrap();
    assert_eq!(audit.position(), 0);
    // Per (cycle, writer): the next counter expected. Unacknowledged events
    // may follow the acknowledged ones, but only as the continuation.
    let mut next_counter: HashMap<(u32, u32), u64> = HashMap::new();
    let mut acks = h.acks.iter().peekable();
    let mut seq = 0;
    loop {
        let events = audit.read(10_000, 8 << 20).unwrap();
        if events.is_empty() {
            break;
        }
        for e in events {
            assert_eq!(
                e.seq, seq,
                "cycle {cycle}: gap or repeat in sequence numbers"
            );
            let id = identify(&e.data)
                .unwrap_or_else(|m| panic!("cycle {cycle}: seq {seq} is corrupt: {m}"));
            let (ec, ew, en) = id;
            let want = next_counter.entry((ec, ew)).or_insert(0);
            assert_eq!(
                en, *want,
                "cycle {cycle}: seq {seq} holds counter {en} of writer {ew} in cycle {ec}, expected {want}"
            );
            *want += 1;
            while acks.peek().is_some_and(|a| a.end <= seq) {
                acks.next();
            }
            if let Some(a) = acks.peek().filter(|a| a.start <= seq) {
                let expect = (a.cycle, a.writer, a.first + (seq - a.start));
                assert_eq!(
                    id, expect,
                    "cycle {cycle}: acknowledged seq {seq} holds the wrong event"
                );
                assert!(
                    e.data[..] == event(expect.0, expect.1, expect.2)[..],
                    "cycle {cycle}: acknowledged seq {seq} has the wrong content"
                );
            }
            seq += 1;
        }
    }
    assert_eq!(
        seq,
        end + 1,
        "cycle {cycle}: read to {seq}, log ends at {}",
        end + 1
    );
    let c = log.stats().counters;
    assert_eq!(
        (c.corrupt_frames, c.corrupt_headers),
        (0, 0),
        "cycle {cycle}: damage found while reading"
    );
    assert!(
        log.stats()
            .consumers
            .iter()
            .all(|c| c.lost.iter().all(|(_, n)| *n == 0)),
        "cycle {cycle}: a consumer lost events"
    );
    drop(audit);
    log.close_blocking().unwrap();
    end + 1
}
