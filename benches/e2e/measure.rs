//! What the bench reads about processes and directories: CPU, peak RSS
//! and bytes written from `/proc`, the RSS split polled while a process
//! runs, the load average, the size of a directory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What /proc says about a process.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcSample {
    pub(crate) cpu_s: f64,
    pub(crate) hwm_kib: u64,
    pub(crate) write_bytes: u64,
    pub(crate) cancelled_write_bytes: u64,
}

pub(crate) fn proc_sample(task: &str) -> ProcSample {
    let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
    // Fields after the command name, which may hold spaces: state is field 3,
    // utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no memory-safety preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let field = |file: &str, key: &str| -> u64 {
        std::fs::read_to_string(format!("{task}/{file}"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
            })
            .unwrap_or(0)
    };
    ProcSample {
        cpu_s: (ticks(11) + ticks(12)) / tck,
        hwm_kib: field("status", "VmHWM"),
        write_bytes: field("io", "write_bytes"),
        cancelled_write_bytes: field("io", "cancelled_write_bytes"),
    }
}

/// The largest anonymous and file-backed resident sizes seen, polled from
/// `/proc/PID/status` every 20 ms: `VmHWM` says how high the total went,
/// this says which kind of page it was (heap, or mapped segment files).
/// Every 10th poll (200 ms) `/proc/PID/smaps` is read too, for the part of
/// the file-backed pages that are mapped log segments (the rest is the
/// binary and its libraries).
#[derive(Default)]
pub(crate) struct RssPeaks {
    anon_kib: AtomicU64,
    file_kib: AtomicU64,
    /// The largest `VmRSS` seen after the first [`SETTLED`] of the watch:
    /// the steady state's peak, without the start-up's.
    settled_kib: AtomicU64,
    segments_kib: AtomicU64,
    pub(crate) stop: AtomicBool,
}

/// The resident KiB of mapped `.seg` files, from `/proc/PID/smaps`.
fn segment_rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let (mut seg, mut sum) = (false, 0);
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let Some(first) = f.next() else { continue };
        if first.ends_with(':') {
            if seg && first == "Rss:" {
                sum += f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        } else {
            // A mapping's header line: range, perms, offset, dev, inode, path.
            seg = f.nth(4).is_some_and(|p| p.ends_with(".seg"));
        }
    }
    Some(sum)
}

/// How long after the start of a watch the start-up is over.
pub(crate) const SETTLED: Duration = Duration::from_secs(3);

impl RssPeaks {
    pub(crate) fn watch(pid: u32) -> Arc<RssPeaks> {
        let peaks = Arc::new(RssPeaks::default());
        let p = peaks.clone();
        let started = std::time::Instant::now();
        std::thread::spawn(move || {
            let path = format!("/proc/{pid}/status");
            let mut polls = 0u64;
            while !p.stop.load(Ordering::Relaxed) {
                if polls.is_multiple_of(10) {
                    if let Some(kib) = segment_rss_kib(pid) {
                        p.segments_kib.fetch_max(kib, Ordering::Relaxed);
                    }
                }
                polls += 1;
                let Ok(text) = std::fs::read_to_string(&path) else {
                    break;
                };
                for l in text.lines() {
                    let Some((k, v)) = l.split_once(':') else {
                        continue;
                    };
                    let kib: u64 = v
                        .split_whitespace()
                        .next()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(0);
                    match k {
                        "RssAnon" => p.anon_kib.fetch_max(kib, Ordering::Relaxed),
                        "RssFile" => p.file_kib.fetch_max(kib, Ordering::Relaxed),
                        "VmRSS" if started.elapsed() >= SETTLED => {
                            p.settled_kib.fetch_max(kib, Ordering::Relaxed)
                        }
                        _ => 0,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        peaks
    }

    /// The steady state's peak RSS in MiB (see `settled_kib`).
    pub(crate) fn settled_mib(&self) -> f64 {
        self.settled_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "anon {:.1} + file-backed {:.1} MiB at their peaks; mapped segments at most {:.1} MiB",
            self.anon_kib.load(Ordering::Relaxed) as f64 / 1024.0,
            self.file_kib.load(Ordering::Relaxed) as f64 / 1024.0,
            self.segments_kib.load(Ordering::Relaxed) as f64 / 1024.0
        )
    }
}

pub(crate) fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The load average, and a warning when the machine is busier than its
/// cores: kill timings and resume times move with the load.
pub(crate) fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let three: Vec<&str> = text.split_whitespace().take(3).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = three
        .first()
        .and_then(|l| l.parse::<f64>().ok())
        .is_some_and(|l| l > cores as f64);
    format!(
        "{}{}",
        three.join(" "),
        if busy {
            format!(
                " (more than the {cores} cores: other work shares the machine, figures are noisy)"
            )
        } else {
            String::new()
        }
    )
}

pub(crate) fn thread_cpu_s() -> f64 {
    // SAFETY: gettid has no preconditions.
    proc_sample(&format!("/proc/self/task/{}", unsafe { libc::gettid() })).cpu_s
}
