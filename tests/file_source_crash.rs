//! Promise 5 with a real process and a real `kill -9`: a line appended
//! durably is never appended again after a restart, and no line is lost,
//! while files rotate (rename and create) under a writer that never stops.
//!
//! The test re-runs its own binary as the child (only `child_entry`,
//! switched on by `HOLDFAST_FILE_CRASH_CHILD`). The child opens the log
//! (`fsync = "always"`) and runs the `file` source on the directory,
//! printing the log's end every few milliseconds. Meanwhile a writer thread
//! in the parent appends numbered lines (Loghub content) to three files and
//! rotates each every few thousand lines: it renames `app-N.log` to
//! `app-N.log.K` (the globs match both), writes a few more lines to the
//! renamed file through its old descriptor, as an application that has not
//! yet reopened its log would, then creates a new `app-N.log`.
//!
//! The parent SIGKILLs the child at random moments: sometimes during its
//! start (recovery, the first scan), sometimes after it has appended a
//! random number of events; rotations also happen while no child runs.
//! After all cycles the writer stops, the source runs once more in-process
//! until every line is in the log, and the log is checked line number by
//! line number: each exactly once.

mod file_source_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use file_source_common::{body, envelope, loghub};
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::file::{self, FileSourceOptions};
use rand::Rng;
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "HOLDFAST_FILE_CRASH_CHILD";
const CYCLES: u32 = 24;
const FILES: usize = 3;
/// Lines per file between rotations.
const ROTATE_EVERY: u64 = 3_000;
/// Lines written to a renamed file through its old descriptor.
const LATE_LINES: u64 = 5;

fn log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 4 << 20,
        max_bytes: 4 << 30,
        fsync: FsyncPolicy::Always,
        when_full: WhenFull::Block,
        ..LogOptions::default()
    }
}

fn source_options(root: &Path) -> FileSourceOptions {
    FileSourceOptions {
        start_at: file::StartAt::Beginning,
        scan_interval: Duration::from_millis(50),
        rotate_wait: Duration::from_millis(500),
        idle_close: Duration::from_secs(60),
        // Far above any pause of the writer: a line is never cut in two.
        line_idle_timeout: Duration::from_secs(30),
        fingerprint_bytes: 256,
        ..FileSourceOptions::new(
            vec![root.join("files/*.log*").to_string_lossy().into_owned()],
            root.join("checkpoints/app"),
        )
    }
}

// ---------------------------------------------------------------------------
// The child

/// Runs only in the child process; a no-op as a normal test.
#[test]
fn child_entry() {
    let Ok(root) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let root = PathBuf::from(root);
        let log = Log::open(root.join("log"), log_options()).expect("child: open the log");
        let metrics = Arc::new(Metrics::new(None));
        let src = tokio::spawn(file::run(
            "app".into(),
            source_options(&root),
            log.clone(),
            metrics,
            CancellationToken::new(),
        ));
        loop {
            let text = format!("SEQ {}\n", log.next_seq());
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).unwrap();
            out.flush().unwrap();
            drop(out);
            if src.is_finished() {
                panic!("child: the source stopped: {:?}", src.await);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

// ---------------------------------------------------------------------------
// The writer

/// The line numbered `n` of file `f`: its number, then Loghub content.
fn line(f: usize, n: u64, content: &[String]) -> String {
    format!(
        "app-{f} {n:08} {}",
        content[(n as usize * 7 + f) % content.len()]
    )
}

fn parse(body: &str) -> Option<(usize, u64)> {
    let mut w = body.splitn(3, ' ');
    let f = w.next()?.strip_prefix("app-")?.parse().ok()?;
    let n = w.next()?.parse().ok()?;
    Some((f, n))
}

/// Appends numbered lines to `FILES` files until `stop`, rotating each
/// every `ROTATE_EVERY` lines. Returns the lines written per file.
fn writer(dir: PathBuf, stop: Arc<AtomicBool>, content: Vec<String>) -> (Vec<u64>, u64) {
    let mut rng = rand::rng();
    let open = |f: usize| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("app-{f}.log")))
            .unwrap()
    };
    let mut files: Vec<std::fs::File> = (0..FILES).map(open).collect();
    let mut next = vec![0u64; FILES];
    let mut rotations = 0;
    while !stop.load(Ordering::Relaxed) {
        for f in 0..FILES {
            let n = rng.random_range(1..40);
            let mut buf = String::new();
            for _ in 0..n {
                buf.push_str(&line(f, next[f], &content));
                buf.push('\n');
                next[f] += 1;
                if next[f].is_multiple_of(ROTATE_EVERY) {
                    files[f].write_all(buf.as_bytes()).unwrap();
                    buf.clear();
                    rotations += 1;
                    let live = dir.join(format!("app-{f}.log"));
                    std::fs::rename(&live, dir.join(format!("app-{f}.log.{}", next[f]))).unwrap();
                    // The application has not reopened its log yet.
                    for _ in 0..LATE_LINES {
                        buf.push_str(&line(f, next[f], &content));
                        buf.push('\n');
                        next[f] += 1;
                    }
                    files[f].write_all(buf.as_bytes()).unwrap();
                    buf.clear();
                    files[f] = open(f);
                }
            }
            files[f].write_all(buf.as_bytes()).unwrap();
        }
        // Pacing, so that a cycle sees a few thousand lines, not a flood.
        std::thread::sleep(Duration::from_micros(rng.random_range(200..1500)));
    }
    (next, rotations)
}

// ---------------------------------------------------------------------------
// The parent

/// Starts the child; kills it either at a random moment of its start or
/// after it appended `target` events. Returns the log's end it last printed.
fn run_child(root: &Path, cycle: u32, rng: &mut impl Rng) -> (u64, &'static str) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if cycle % 2 == 1 {
        cmd.env(file::POLL_ONLY_ENV, "1");
    }
    let mut child = cmd.spawn().expect("spawning the child");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if let Some(s) = l.strip_prefix("SEQ ").and_then(|s| s.parse().ok()) {
                let _ = tx.send(s);
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut last = 0;
    let how = if rng.random_bool(0.3) {
        // During start-up: log recovery, position recovery, the first scan.
        std::thread::sleep(Duration::from_millis(rng.random_range(0..120)));
        "during start-up"
    } else {
        let target = rng.random_range(1..4_000);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut first = None;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(s) => {
                    last = s;
                    let f = *first.get_or_insert(s);
                    if s >= f + target {
                        break;
                    }
                }
                Err(_) if Instant::now() < deadline && child.try_wait().unwrap().is_none() => {}
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "child made no progress ({e:?}); stderr:\n{}",
                        errors.join().unwrap()
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(0..3000)));
        "while appending"
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "child exited by itself: {}",
        errors.join().unwrap()
    );
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    reader.join().unwrap();
    let _ = errors.join();
    while let Ok(s) = rx.try_recv() {
        last = s;
    }
    (last, how)
}

#[test]
fn kill9_never_loses_or_repeats_a_line() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("files")).unwrap();
    let content: Vec<String> = loghub()
        .iter()
        .flat_map(|(_, b)| file_source_common::expected_lines(b))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (dir, stop) = (root.join("files"), stop.clone());
        std::thread::spawn(move || writer(dir, stop, content))
    };
    let mut rng = rand::rng();
    for cycle in 0..CYCLES {
        let (seq, how) = run_child(&root, cycle, &mut rng);
        eprintln!(
            "cycle {cycle:2}: killed {how}; the log ended at {seq} ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        // Sometimes let files rotate while nothing runs.
        if rng.random_bool(0.3) {
            std::thread::sleep(Duration::from_millis(rng.random_range(10..200)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (written, rotations) = w.join().unwrap();
    let total: u64 = written.iter().sum();
    eprintln!("writer: {total} lines, {rotations} rotations; a last run reads the rest");

    // The last run, in-process, until every line is in the log.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (seen, dups, bad) = rt.block_on(async {
        let log = Log::open(root.join("log"), log_options()).unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(file::run(
            "app".into(),
            source_options(&root),
            log.clone(),
            Arc::new(Metrics::new(None)),
            stop.clone(),
        ));
        let mut seen: HashMap<(usize, u64), u32> = HashMap::new();
        let mut reader = log.reader(0);
        let mut bad = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while (seen.len() as u64) < total {
            let events = reader.read(100_000, 64 << 20).unwrap();
            if events.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {total} lines in the log after the last run",
                    seen.len()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            for e in events {
                let b = body(&envelope(&e));
                match parse(&b) {
                    Some(k) => *seen.entry(k).or_default() += 1,
                    None => bad.push(b),
                }
            }
        }
        stop.cancel();
        task.await.unwrap().unwrap();
        // Anything appended after the last line arrived counts too.
        for e in reader.read(1_000_000, 1 << 30).unwrap() {
            let b = body(&envelope(&e));
            match parse(&b) {
                Some(k) => *seen.entry(k).or_default() += 1,
                None => bad.push(b),
            }
        }
        let dups: Vec<((usize, u64), u32)> = seen
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| (*k, *n))
            .collect();
        log.close().await.unwrap();
        (seen, dups, bad)
    });
    assert!(
        bad.is_empty(),
        "lines nobody wrote (cut or merged): {:?}",
        &bad[..bad.len().min(5)]
    );
    let mut d = dups.clone();
    d.sort();
    assert!(
        d.is_empty(),
        "{} lines appended more than once, e.g. {:?}",
        d.len(),
        &d[..d.len().min(10)]
    );
    for (f, &n) in written.iter().enumerate() {
        let missing: Vec<u64> = (0..n)
            .filter(|i| !seen.contains_key(&(f, *i)))
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "app-{f}: lines missing, e.g. {missing:?}"
        );
    }
    assert_eq!(seen.len() as u64, total);
    eprintln!(
        "{CYCLES} kill -9 cycles, {total} lines, {rotations} rotations: each line exactly once ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}
