//! Rotation by the real `logrotate` (Debian package `logrotate`; CI installs
//! it) while a writer appends numbered lines without pause, in both modes:
//!
//! * `create`: logrotate renames `app.log` to `app.log.1` (shifting older
//!   ones) and creates a new `app.log`. Only `app.log` matches the globs, so
//!   the rotated file is read to its end through the descriptor the source
//!   holds. Every line arrives exactly once.
//! * `copytruncate`: logrotate copies `app.log` to `app.log.1` and truncates
//!   `app.log`. The globs match the copies, so lines the source had not read
//!   before the copy are read from the copy, and the truncated file goes on
//!   as a new generation. Lines written between the copy and the truncation
//!   exist in neither file: that is copytruncate's own window, and the only
//!   loss allowed (one of them the source had read only part of arrives
//!   cut, as documented). The writer marks the lines it wrote while
//!   logrotate ran; every other line must arrive exactly once, and none
//!   twice.
//!
//! The writer opens the file for each batch of lines (so in `create` mode
//! it moves to the new file by itself, but never creates it: that is
//! logrotate's job), under a lock the rotator also takes to mark the start
//! and end of each logrotate run. The writer waits for the source only when
//! it is 10,000 lines ahead; each rotation waits until the source has read a
//! line written to the file being rotated (conditions, never sleeps).

mod file_source_common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use file_source_common::*;
use rand::Rng;

const ROTATIONS: usize = 5;
/// How far the writer may run ahead of the log, in lines.
const MAX_LEAD: usize = 10_000;

fn logrotate(conf: &Path, state: &Path) {
    let out = Command::new("logrotate")
        .arg("-s")
        .arg(state)
        .arg("-f")
        .arg(conf)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run logrotate ({e}): install the Debian package `logrotate` (apt-get install -y logrotate)")
        });
    assert!(
        out.status.success(),
        "logrotate failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lines written, whether each was written while logrotate ran, and the
/// inode of the file it was written to.
type Written = Vec<(String, bool, u64)>;

/// The lines still missing, for the failure message: per file (inode)
/// written to, how many lines it got and which are missing (a file never
/// read has all of its lines missing, a stall only its last ones); the first
/// missing lines written outside logrotate's runs, with whether the line
/// before, the line and the line after were written during one (`R`) or
/// not (`w`); and lines in the log nobody wrote (pieces of a cut line).
fn describe_missing(written: &Written, got: &HashMap<&str, usize>) -> String {
    let mut per: Vec<(u64, usize, Vec<&str>)> = Vec::new();
    for (l, _, ino) in written {
        if per.last().is_none_or(|p| p.0 != *ino) {
            per.push((*ino, 0, Vec::new()));
        }
        let p = per.last_mut().unwrap();
        p.1 += 1;
        if !got.contains_key(l.as_str()) {
            p.2.push(l);
        }
    }
    let outside: Vec<String> = written
        .iter()
        .enumerate()
        .filter(|(_, w)| !w.1 && !got.contains_key(w.0.as_str()))
        .take(5)
        .map(|(i, w)| {
            let near = |j: usize| written.get(j).map_or('-', |w| if w.1 { 'R' } else { 'w' });
            format!(
                "{} [{}{}{}]",
                &w.0[..12.min(w.0.len())],
                near(i.wrapping_sub(1)),
                near(i),
                near(i + 1)
            )
        })
        .collect();
    let per_file = per
        .iter()
        .map(|(ino, n, m)| {
            let num = |l: &&str| l.get(5..12).unwrap_or("?").to_string();
            format!(
                "inode {ino}: {n} lines, {} missing{}",
                m.len(),
                match (m.first(), m.last()) {
                    (Some(a), Some(b)) => format!(" ({}..={})", num(a), num(b)),
                    _ => String::new(),
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let known: HashSet<&str> = written.iter().map(|w| w.0.as_str()).collect();
    let strangers: Vec<String> = got
        .keys()
        .filter(|g| !known.contains(*g))
        .take(5)
        .map(|g| g.chars().take(40).collect())
        .collect();
    format!("{per_file}; missing outside logrotate's runs: {outside:?}; lines nobody wrote: {strangers:?}")
}

async fn rotate_under_a_writer(mode: &str, include: &str) -> (Harness, Written) {
    let h = Harness::new();
    let live = h.path("app.log");
    let conf = h.tmp.path().join("logrotate.conf");
    std::fs::write(
        &conf,
        format!(
            "{} {{\n    rotate 50\n    {mode}\n    missingok\n    nocompress\n}}\n",
            live.display()
        ),
    )
    .unwrap();
    let state = h.tmp.path().join("logrotate.state");
    let content: Vec<String> = loghub()
        .iter()
        .flat_map(|(_, b)| expected_lines(b))
        .take(5000)
        .collect();

    std::fs::File::create(&live).unwrap();
    let rotating = Arc::new(Mutex::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    // The number of the next line the writer writes (updated under `rotating`).
    let next = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (rotating, stop, live, next) =
            (rotating.clone(), stop.clone(), live.clone(), next.clone());
        let mut reader = h.log.reader(0);
        std::thread::spawn(move || {
            let mut rng = rand::rng();
            let mut written: Written = Vec::new();
            let mut n = 0usize;
            // The highest line number in the log.
            let mut newest = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // At most MAX_LEAD lines ahead of the source: under load it
                // reads slower than this writer writes, and an unbounded
                // backlog, growing at every wait for the source, would make
                // the test's length depend on the machine's load.
                if n > newest + MAX_LEAD {
                    for e in reader.read(10_000, 16 << 20).unwrap() {
                        let b = body(&envelope(&e));
                        newest = newest.max(line_number(&b).unwrap_or(0));
                    }
                    if n > newest + MAX_LEAD {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                }
                let k = rng.random_range(1..20);
                let lines: Vec<String> = (n..n + k)
                    .map(|i| format!("line {i:07} {}", content[i % content.len()]))
                    .collect();
                n += k;
                let mut buf = lines.join("\n");
                buf.push('\n');
                let gate = rotating.lock().unwrap();
                // Never create the file: in `create` mode, logrotate moves a
                // file it finds where it wants to create one to
                // `app.log-<date>.backup`. It is missing only between
                // logrotate's rename and its create.
                let mut f = loop {
                    match std::fs::OpenOptions::new().append(true).open(&live) {
                        Ok(f) => break f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            std::thread::yield_now()
                        }
                        Err(e) => panic!("opening {}: {e}", live.display()),
                    }
                };
                f.write_all(buf.as_bytes()).unwrap();
                let ino = f.metadata().unwrap().ino();
                written.extend(lines.into_iter().map(|l| (l, *gate, ino)));
                next.store(n, Ordering::Relaxed);
                drop(gate);
                std::thread::sleep(Duration::from_micros(rng.random_range(100..800)));
            }
            written
        })
    };

    let src = h.start(file_source_options(&h, include));
    // Lines from this number on were written to the current file.
    let mut first_in_file = 0;
    for _ in 0..ROTATIONS {
        // Let the source get going on this file before rotating it: 500
        // more events, and a line written to this file (or, copytruncate,
        // this generation of it). The 500 events alone may all come from
        // the backlog of the files before while the source is behind the
        // writer, and then a file could be rotated before the source has
        // seen it: in `create` mode (only `app.log` matches) it would never
        // be read, a documented limit; in `copytruncate` mode two
        // truncations would look like one.
        let at = h.log.next_seq();
        let waiting = Instant::now();
        h.wait_events(at + 500, Duration::from_secs(20)).await;
        wait_for_line(&h, at, first_in_file, Duration::from_secs(20)).await;
        eprintln!("{mode}: rotating after {:?} of reading", waiting.elapsed());
        *rotating.lock().unwrap() = true;
        logrotate(&conf, &state);
        let mut gate = rotating.lock().unwrap();
        *gate = false;
        first_in_file = next.load(Ordering::Relaxed);
        drop(gate);
    }
    let at = h.log.next_seq();
    h.wait_events(at + 500, Duration::from_secs(20)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();

    // Wait until every line that must arrive has arrived.
    let must: Vec<&str> = written
        .iter()
        .filter(|w| !w.1)
        .map(|w| w.0.as_str())
        .collect();
    // Read on as the log grows (decoding the whole log again at every look
    // would take the CPU the source needs to catch up).
    let stopped = Instant::now();
    let deadline = stopped + Duration::from_secs(30);
    let mut missing: HashSet<&str> = must.iter().copied().collect();
    let mut reader = h.log.reader(0);
    loop {
        let events = reader.read(10_000, 16 << 20).unwrap();
        for e in &events {
            missing.remove(body(&envelope(e)).as_str());
        }
        if missing.is_empty() {
            break;
        }
        if events.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{mode}: {} lines still missing after 30 s; {}",
                missing.len(),
                describe_missing(&written, &counts(&h.bodies()))
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "{mode}: every line that must arrive had arrived {:?} after the writer stopped ({} lines written)",
        stopped.elapsed(),
        written.len()
    );
    src.stop().await;
    let rotated = std::fs::read_dir(&h.files).unwrap().count() - 1;
    assert!(
        rotated >= ROTATIONS,
        "{mode}: logrotate left {rotated} rotated files"
    );
    (h, written)
}

/// The number of a line the writer wrote (`line 0001234 ...`); none for a
/// piece of a cut line too short to hold it.
fn line_number(body: &str) -> Option<usize> {
    body.strip_prefix("line ")?.get(..7)?.parse().ok()
}

/// Waits until the log holds, at or after sequence number `from`, a line
/// numbered `n` or above.
async fn wait_for_line(h: &Harness, from: u64, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    let mut reader = h.log.reader(from);
    let mut highest = None;
    loop {
        let events = reader.read(10_000, 16 << 20).unwrap();
        for e in &events {
            let l = line_number(&body(&envelope(e)));
            highest = highest.max(l);
        }
        if highest.is_some_and(|l| l >= n) {
            return;
        }
        if events.is_empty() {
            assert!(
                Instant::now() < deadline,
                "no line numbered {n} or above in the log after {within:?} (highest since: {highest:?})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn file_source_options(h: &Harness, include: &str) -> holdfast::sources::file::FileSourceOptions {
    holdfast::sources::file::FileSourceOptions {
        fingerprint_bytes: 256,
        ..h.options(include)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logrotate_create_loses_and_repeats_nothing() {
    let (h, written) = rotate_under_a_writer("create", "app.log").await;
    let want: Vec<String> = written.into_iter().map(|w| w.0).collect();
    assert_each_once(&h.bodies(), &want);
    assert!(h.metric("holdfast_file_source_rotations_total") >= ROTATIONS as f64);
    eprintln!(
        "create: {} lines through {ROTATIONS} rotations, each once",
        want.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logrotate_copytruncate_repeats_nothing_and_loses_only_its_window() {
    let (h, written) = rotate_under_a_writer("copytruncate", "app.log*").await;
    let got = h.bodies();
    let c = counts(&got);
    let mut dups: Vec<_> = c.iter().filter(|(_, n)| **n > 1).collect();
    dups.sort();
    assert!(
        dups.is_empty(),
        "copytruncate: {} lines appended twice, e.g. {:?}",
        dups.len(),
        &dups[..dups.len().min(5)]
    );
    let known: HashMap<&str, bool> = written.iter().map(|w| (w.0.as_str(), w.1)).collect();
    // A line of the window that the source had read only part of when
    // logrotate truncated the file (the writer's write was not yet all
    // visible; the copy was taken before it) is the old generation's
    // unfinished last line, and arrives as read, cut (documented): its
    // first bytes, with the rest of it in neither file.
    let cut_window_line = |g: &str| {
        written
            .iter()
            .any(|w| w.1 && w.0.starts_with(g) && !c.contains_key(w.0.as_str()))
    };
    let strangers: Vec<&String> = got
        .iter()
        .filter(|g| !known.contains_key(g.as_str()) && !cut_window_line(g))
        .collect();
    assert!(
        strangers.is_empty(),
        "copytruncate: {} lines nobody wrote, e.g. {:?}",
        strangers.len(),
        &strangers[..strangers.len().min(5)]
    );
    let lost: Vec<&str> = written
        .iter()
        .filter(|w| !c.contains_key(w.0.as_str()))
        .map(|w| w.0.as_str())
        .collect();
    assert!(
        lost.iter().all(|l| known[l]),
        "copytruncate: lines written outside logrotate's runs were lost"
    );
    let window = written.iter().filter(|w| w.1).count();
    assert_eq!(
        h.metric("holdfast_file_source_truncations_total"),
        ROTATIONS as f64
    );
    eprintln!(
        "copytruncate: {} lines through {ROTATIONS} rotations; {window} written while logrotate ran, {} of them lost (the copy-to-truncate window)",
        written.len(),
        lost.len()
    );
}
