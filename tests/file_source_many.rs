//! 10,000 matched files: every line arrives once, open descriptors stay
//! under the source's cap, an idle source appends nothing and does not
//! spin (its CPU figure is in `benches/file_source.rs`), and files
//! closed to respect the cap are reopened when they change. Runs with
//! inotify switched off, so it also proves that polling alone finds
//! everything. Its own test binary: it counts the process's descriptors.

mod file_source_common;

use std::time::{Duration, Instant};

use file_source_common::*;
use holdfast::sources::file;

const FILES: usize = 10_000;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// User + system CPU seconds of this process.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn max_open_cap() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft: usize = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap();
    (soft / 4).clamp(16, 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_files() {
    // Only this test runs in this binary, so the variable reaches no other.
    std::env::set_var(file::POLL_ONLY_ENV, "1");
    let h = Harness::new();
    let mut want = Vec::new();
    for i in 0..FILES {
        let (b, lines) = numbered(&format!("file{i:05}"), 0, 2);
        std::fs::write(h.path(&format!("f{i:05}.log")), &b).unwrap();
        want.extend(lines);
    }
    let baseline = open_fds();
    let started = Instant::now();
    let src = h.start(file::FileSourceOptions {
        scan_interval: Duration::from_secs(1),
        ..h.options("*.log")
    });
    let mut max_fds = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.log.next_seq() < want.len() as u64 {
        max_fds = max_fds.max(open_fds());
        assert!(
            Instant::now() < deadline,
            "only {} of {} lines after 60 s",
            h.log.next_seq(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "{FILES} files read in {:.2} s; at most {} descriptors open (baseline {baseline}, cap {})",
        started.elapsed().as_secs_f64(),
        max_fds,
        max_open_cap()
    );
    assert!(
        max_fds <= baseline + max_open_cap() + 64,
        "{max_fds} descriptors open (baseline {baseline}, cap {})",
        max_open_cap()
    );
    assert_eq!(h.metric("holdfast_file_source_files_watched"), FILES as f64);

    // Idle: nothing is appended, nothing changes, and the source does not
    // spin. What idle costs is a figure, not a pass/fail line: it depends on
    // the machine and on what else runs (`cargo bench --bench file_source`,
    // the `idle` rows, in a release build). The bound here is what a tailer
    // thread busy-looping on both cores would reach, which no slow or loaded
    // machine reaches for a tailer that waits between passes.
    let seq = h.log.next_seq();
    let cpu = cpu_seconds();
    let wall = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = cpu_seconds() - cpu;
    let elapsed = wall.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    eprintln!("idle with {FILES} files (debug build, polling only): {used:.2} CPU seconds in {elapsed:.1} s");
    assert_eq!(h.log.next_seq(), seq, "an idle source appended events");
    assert_eq!(h.metric("holdfast_file_source_files_watched"), FILES as f64);
    assert!(
        used < 0.9 * cores.min(2.0) * elapsed,
        "an idle source kept {:.1} cores busy ({used:.2} CPU seconds in {elapsed:.1} s): it spins",
        used / elapsed
    );

    // Files closed to stay under the cap are reopened when they change.
    let mut n = want.len() as u64;
    for i in (0..FILES).step_by(97) {
        let line = format!("file{i:05} later");
        append(
            &h.path(&format!("f{i:05}.log")),
            format!("{line}\n").as_bytes(),
        );
        want.push(line);
        n += 1;
    }
    h.wait_events(n, Duration::from_secs(30)).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
    assert!(
        open_fds() <= baseline + 2,
        "descriptors left open after the source stopped"
    );
}
