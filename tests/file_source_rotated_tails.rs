//! Rotated tails are never lost, through the real binary and the real
//! `logrotate` (Debian package `logrotate`; CI installs it) in `create` mode,
//! with `include` covering only the live name, the most common config.
//!
//! The application holds `app.log` open and writes numbered lines to it. It
//! notices a rotation only a moment later, as a daemon that reopens its log
//! on a signal does: after logrotate renamed `app.log` to `app.log.1` it
//! goes on writing into the renamed file for a random 50–800 ms, then opens
//! the new `app.log`. The lines written in that moment are in a file no glob
//! matches.
//!
//! * Killed at random points (`kill -9` of the agent 0–1.5 s after a
//!   rename, so during the late writes, after them, or before the agent has
//!   read them; and now and then while it starts): on restart the agent finds the renamed file again by device,
//!   inode and first bytes in its directory, and reads its tail. Every line
//!   reaches the `file` sink's NDJSON.
//! * Without a kill, with `scan_interval = "1h"` and `rotate_wait = "30s"`:
//!   the late lines arrive within a few seconds, not at the next scan and
//!   not when `rotate_wait` ends.
//!
//! * In-process, a file the source had closed as idle (`idle_close`) when
//!   it was renamed out of the globs is found in its directory and read.
//!
//! Rotations happen only once the agent has recorded the live file in its
//! checkpoint: a file rotated out of the globs before the agent ever saw it
//! is not read (a documented limit, not what is tested here).

#[path = "common/daemon.rs"]
mod daemon;
mod file_source_common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use daemon::{wait_for, Agent};
use rand::Rng;

const KILLS: usize = 10;
/// What the agent logs when it finds a rotated file again by identity.
const FOUND_AGAIN: &str = "under a name outside the include patterns";

/// An agent tailing `<dir>/logs/app.log` (only that name) into a `file`
/// sink at `<dir>/out`.
fn agent(scan_interval: &str, rotate_wait: &str) -> Agent {
    let a = Agent::new("");
    std::fs::create_dir_all(a.path("logs")).unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"{scan_interval}\"\nrotate_wait = \"{rotate_wait}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        a.path("logs/app.log").display(),
        a.path("out").display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(a.path("logs/app.log"), b"").unwrap();
    std::fs::write(
        a.path("logrotate.conf"),
        format!(
            "{} {{\n    rotate 50\n    create\n    missingok\n    nocompress\n}}\n",
            a.path("logs/app.log").display()
        ),
    )
    .unwrap();
    a
}

fn logrotate(a: &Agent) {
    let out = Command::new("logrotate")
        .arg("-s")
        .arg(a.path("logrotate.state"))
        .arg("-f")
        .arg(a.path("logrotate.conf"))
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

fn line(n: u64) -> String {
    format!("line {n:08} kernel: eth0: link up, 1000 Mbps, full duplex, lpa 0x45E1\n")
}

fn inode(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// The inodes of the files the agent's checkpoint records as followed (not
/// detached).
fn checkpointed_inodes(a: &Agent) -> Vec<u64> {
    let Ok(bytes) = std::fs::read(a.data_dir().join("checkpoints/app/checkpoint.json")) else {
        return Vec::new();
    };
    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes[nl + 1..]) else {
        return Vec::new();
    };
    v["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["detached_unix_ms"].is_null())
        .filter_map(|r| r["ino"].as_u64())
        .collect()
}

/// Waits until the agent has recorded the file now at `app.log`.
fn wait_recorded(a: &Agent) {
    let live = a.path("logs/app.log");
    wait_for(
        "the checkpoint to record the live file",
        Duration::from_secs(20),
        || {
            let ino = inode(&live)?;
            checkpointed_inodes(a).contains(&ino).then_some(())
        },
    );
}

/// The application: writes numbered lines into the file it holds open, and
/// moves to the new `app.log` only a while after a rotation.
struct App {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl App {
    /// `late`: how long it goes on writing into a renamed file (ms range).
    fn start(live: PathBuf, late: std::ops::Range<u64>) -> App {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rng = rand::rng();
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&live)
                .unwrap();
            let mut n = 0u64;
            let mut noticed: Option<(Instant, Duration)> = None;
            while !s.load(Ordering::Relaxed) {
                let k = rng.random_range(1..6);
                let buf: String = (n..n + k).map(line).collect();
                f.write_all(buf.as_bytes()).unwrap();
                n += k;
                let ours = f.metadata().unwrap().ino();
                if inode(&live).is_some_and(|i| i != ours) {
                    let (at, lasts) = *noticed.get_or_insert_with(|| {
                        (
                            Instant::now(),
                            Duration::from_millis(rng.random_range(late.clone())),
                        )
                    });
                    if at.elapsed() >= lasts {
                        // Never create it: that is logrotate's job. Missing
                        // only between a rename and its create: try again.
                        match std::fs::OpenOptions::new().append(true).open(&live) {
                            Ok(new) => {
                                f = new;
                                noticed = None;
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => panic!("opening {}: {e}", live.display()),
                        }
                    }
                }
                std::thread::sleep(Duration::from_micros(rng.random_range(500..2500)));
            }
            n
        });
        App { stop, thread }
    }

    /// Stops writing; the number of lines written (numbered from 0).
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Reads the `file` sink's NDJSON as it grows: line number → times seen.
/// Only whole lines are taken, so a line the sink is still writing (or a
/// torn one a kill left, which the sink cuts off when it restarts) is read
/// once it is complete, or never.
struct Sink {
    dir: PathBuf,
    read: HashMap<PathBuf, u64>,
    seen: BTreeMap<u64, u32>,
    /// Each line's event id, as first seen.
    ids: HashMap<u64, String>,
    /// Lines seen again with another id (a line read again after a restart
    /// must carry the id it had: its file keeps its identity when renamed).
    other_ids: Vec<u64>,
}

impl Sink {
    fn new(dir: PathBuf) -> Sink {
        Sink {
            dir,
            read: HashMap::new(),
            seen: BTreeMap::new(),
            ids: HashMap::new(),
            other_ids: Vec::new(),
        }
    }

    fn poll(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let at = self.read.entry(p.clone()).or_insert(0);
            let Ok(mut f) = std::fs::File::open(&p) else {
                continue;
            };
            f.seek(SeekFrom::Start(*at)).unwrap();
            let mut buf = Vec::new();
            f.read_to_end(&mut buf).unwrap();
            let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            for l in buf[..end].split(|&b| b == b'\n') {
                let v: serde_json::Value = serde_json::from_slice(l)
                    .unwrap_or_else(|e| panic!("{}: not JSON ({e})", p.display()));
                let body = v["record"]["body"]["stringValue"].as_str().unwrap();
                let n: u64 = body
                    .strip_prefix("line ")
                    .and_then(|b| b.get(..8))
                    .and_then(|b| b.parse().ok())
                    .unwrap_or_else(|| panic!("a line nobody wrote: {body:?}"));
                *self.seen.entry(n).or_insert(0) += 1;
                let id = v["id"].to_string();
                if self.ids.entry(n).or_insert_with(|| id.clone()) != &id {
                    self.other_ids.push(n);
                }
            }
            *at += end as u64 + 1;
        }
    }

    fn missing(&self, written: u64) -> Vec<u64> {
        (0..written)
            .filter(|n| !self.seen.contains_key(n))
            .collect()
    }

    /// Waits until every line below `written` is in the sink's output.
    fn wait_all(&mut self, written: u64, within: Duration) {
        let end = Instant::now() + within;
        loop {
            self.poll();
            let missing = self.missing(written);
            if missing.is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "{} of {written} lines missing after {within:?}, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(10)]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn rotated_tails_arrive_across_kill_9_at_random_points() {
    let mut a = agent("1s", "2s");
    let app = App::start(a.path("logs/app.log"), 50..800);
    let mut rng = rand::rng();
    let started = Instant::now();
    let mut found_again = 0;
    let mut kills = 0;
    for cycle in 0..KILLS {
        if cycle % 3 == 1 {
            // Also killed while starting: recovering, or in its first scan,
            // finding rotated files again.
            a.start();
            std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
            a.kill9();
            kills += 1;
            found_again += a.stderr().matches(FOUND_AGAIN).count();
        }
        a.start();
        a.wait_ready();
        wait_recorded(&a);
        logrotate(&a);
        // Within the application's late writes, after them, or before the
        // agent has read any of them.
        std::thread::sleep(Duration::from_millis(rng.random_range(0..1500)));
        a.kill9();
        kills += 1;
        found_again += a.stderr().matches(FOUND_AGAIN).count();
    }
    a.start();
    a.wait_ready();
    // One more rotation with the agent up; the application stops at a
    // random point of its late writes or after them.
    wait_recorded(&a);
    logrotate(&a);
    std::thread::sleep(Duration::from_millis(rng.random_range(0..1000)));
    let written = app.stop();
    let mut sink = Sink::new(a.path("out"));
    sink.wait_all(written, Duration::from_secs(60));
    found_again += a.stderr().matches(FOUND_AGAIN).count();
    assert!(a.stop().success(), "{}", a.stderr());

    // After a clean stop every output line is whole: read it all again.
    let mut all = Sink::new(a.path("out"));
    all.poll();
    assert_eq!(all.missing(written), Vec::<u64>::new());
    assert_eq!(
        all.other_ids,
        Vec::<u64>::new(),
        "lines repeated with another id"
    );
    let distinct: std::collections::HashSet<&String> = all.ids.values().collect();
    assert_eq!(distinct.len(), all.ids.len(), "two lines share an id");
    let repeated = all.seen.values().filter(|&&c| c > 1).count();
    let rotated = std::fs::read_dir(a.path("logs")).unwrap().count() - 1;
    eprintln!(
        "{written} lines, {kills} kills, {rotated} rotated files, {found_again} times a rotated file was found \
         again after a restart, {repeated} lines delivered more than once, {:?}",
        started.elapsed()
    );
    assert!(rotated > KILLS, "logrotate left {rotated} rotated files");
}

#[test]
fn late_lines_arrive_without_waiting_for_a_scan_or_rotate_wait() {
    let mut a = agent("1h", "30s");
    let live = a.path("logs/app.log");
    let mut sink = Sink::new(a.path("out"));
    a.start();
    a.wait_ready();
    let mut old = std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap();
    let write = |f: &mut std::fs::File, lines: std::ops::Range<u64>| {
        let buf: String = lines.map(line).collect();
        f.write_all(buf.as_bytes()).unwrap();
    };
    write(&mut old, 0..100);
    sink.wait_all(100, Duration::from_secs(20));

    logrotate(&a);
    // The agent saw the rotation (inotify, not the hourly scan, woke it):
    // it recorded the new file.
    wait_recorded(&a);
    let late = Instant::now();
    write(&mut old, 100..200);
    // Far below rotate_wait (30 s) and scan_interval (1 h).
    sink.wait_all(200, Duration::from_secs(5));
    eprintln!(
        "lines written into the renamed file arrived {:?} after they were written",
        late.elapsed()
    );

    let mut new = std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap();
    write(&mut new, 200..300);
    write(&mut old, 300..310);
    sink.wait_all(310, Duration::from_secs(5));
    assert!(a.stop().success(), "{}", a.stderr());
    let mut all = Sink::new(a.path("out"));
    all.poll();
    assert_eq!(all.missing(310), Vec::<u64>::new());
}

/// A file closed as idle holds no descriptor to drain it by: renamed out of
/// the globs, it is looked for by inode in its directory, and the lines
/// written into it after the rename are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_closed_as_idle_then_rotated_away_is_found_in_its_directory() {
    use file_source_common::{assert_each_once, Harness};
    let h = Harness::new();
    let live = h.path("app.log");
    let src = h.start(holdfast::sources::file::FileSourceOptions {
        idle_close: Duration::from_millis(200),
        ..h.options("app.log")
    });
    let append = |p: &Path, lines: std::ops::Range<u64>| {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(lines.map(line).collect::<String>().as_bytes())
            .unwrap();
    };
    append(&live, 0..100);
    h.wait_events(100, Duration::from_secs(20)).await;
    // Open (the gauge is set after the lines are sent), then closed as idle.
    h.wait_metric(
        "holdfast_file_source_open_files",
        1.0,
        Duration::from_secs(20),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.metric("holdfast_file_source_open_files") > 0.0 {
        assert!(Instant::now() < deadline, "the idle file was not closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::rename(&live, h.path("app.log.1")).unwrap();
    append(&h.path("app.log.1"), 100..200);
    append(&live, 200..250);
    h.wait_events(250, Duration::from_secs(20)).await;
    src.stop().await;
    let want: Vec<String> = (0..250).map(|n| line(n).trim_end().to_string()).collect();
    assert_each_once(&h.bodies(), &want);
}
