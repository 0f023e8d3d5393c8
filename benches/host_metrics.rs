//! `host_metrics` source benchmark: what collecting this machine's figures
//! costs the release binary.
//!
//! ```text
//! cargo bench --bench host_metrics                          # 60 s per agent
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench host_metrics   # 10 s per agent
//! HOLDFAST_BENCH_BIN=/usr/bin/holdfast cargo bench --bench host_metrics
//! ```
//!
//! Two agents run one after the other, each a `holdfast run` of the release
//! binary with a `file` sink: first one with only a `host_metrics` source
//! at `interval = "1s"` (so a minute gives sixty collections; the default
//! is 30 s), then the baseline with only a `file` source that the bench
//! feeds as many 600-byte lines a second as the first appended points, so
//! that the log and the sink do the same work in both (their compression
//! contexts, batches and buffers are in the baseline too). After a 3 s
//! warm-up, over the measured window:
//!
//! * the collector thread's CPU (`/proc/<pid>/task/<tid>/schedstat`, in
//!   nanoseconds, of the thread named `host_metrics:bench`): reading /proc
//!   and /sys and building the batch, per collection and per point;
//! * the whole process's CPU beyond the baseline's: what collecting costs
//!   beyond appending and sending as many events of another source;
//! * both scaled to the default 30 s interval as a share of one core
//!   (target: under 0.1 %);
//! * RSS (`VmRSS` at the end) beyond the baseline's (target: under 1 MiB),
//!   and, for context, beyond a third agent's with an idle `file` source
//!   (which never appends: no compression context, no sink batches).
//!
//! Not a pass/fail test: it prints the figures. The machine may be shared;
//! CPU per collection is the figure that does not depend on it.

#[path = "common/table.rs"]
mod table;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use table::Table;

const INTERVAL_S: f64 = 1.0;
const DEFAULT_INTERVAL_S: f64 = 30.0;

fn quick() -> bool {
    std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn binary() -> String {
    std::env::var("HOLDFAST_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_holdfast").into())
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system, no memory is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn stat_cpu(path: &Path) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields after the state: utime and stime are the 12th and 13th.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}

fn rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Nanoseconds a task ran (`schedstat`'s first field), as seconds.
fn schedstat_cpu(path: &Path) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

/// The task (thread) of `pid` whose name starts with `name`.
fn thread(pid: u32, name: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| name.starts_with(c.trim())))
        .map(|t| t.join("schedstat"))
}

fn metrics(api: SocketAddr) -> String {
    let Ok(mut c) = TcpStream::connect(api) else {
        return String::new();
    };
    let _ = write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

struct Agent {
    child: Child,
    api: SocketAddr,
    dir: tempfile::TempDir,
}

impl Agent {
    fn start(source: &str) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = source.replace("{dir}", &dir.path().display().to_string());
        let api = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let config = dir.path().join("holdfast.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\n\n[api]\nlisten = \"{api}\"\n\n{source}\n\
                 [sinks.out]\ntype = \"file\"\ninputs = [\"bench\"]\n",
                dir.path().join("data").display()
            ),
        )
        .expect("write config");
        let child = Command::new(binary())
            .args(["run", "--config", config.to_str().expect("utf-8 path")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start holdfast");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !metrics(api).contains("holdfast_source_events_total") {
            assert!(Instant::now() < deadline, "holdfast did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Agent { child, api, dir }
    }

    fn cpu(&self) -> f64 {
        stat_cpu(Path::new(&format!("/proc/{}/stat", self.child.id()))).unwrap_or(0.0)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run {
    cpu_s: f64,
    thread_cpu_s: f64,
    points: f64,
    rss_kib: f64,
    seconds: f64,
}

/// Sleeps `d`, calling `tick` once a second.
fn each_second(d: Duration, tick: &mut impl FnMut()) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        tick();
        let left = end.saturating_duration_since(Instant::now());
        std::thread::sleep(Duration::from_secs(1).min(left));
    }
}

/// Runs an agent with `source` (`{dir}` is its directory), calling `tick`
/// with that directory once a second.
fn measure(source: &str, window: Duration, tick: impl Fn(&Path)) -> Run {
    let a = Agent::start(source);
    let mut tick = || tick(a.dir.path());
    each_second(Duration::from_secs(3), &mut tick);
    let pid = a.child.id();
    let t = thread(pid, "host_metrics:bench");
    let thread_cpu = || t.as_deref().and_then(schedstat_cpu).unwrap_or(0.0);
    let events = |a: &Agent| {
        sample(
            &metrics(a.api),
            "holdfast_source_events_total{source=\"bench\"}",
        )
    };
    let (cpu0, tcpu0, ev0, at0) = (a.cpu(), thread_cpu(), events(&a), Instant::now());
    each_second(window, &mut tick);
    let (cpu1, tcpu1, ev1) = (a.cpu(), thread_cpu(), events(&a));
    Run {
        cpu_s: cpu1 - cpu0,
        thread_cpu_s: tcpu1 - tcpu0,
        points: ev1 - ev0,
        rss_kib: rss_kib(pid),
        seconds: at0.elapsed().as_secs_f64(),
    }
}

fn main() {
    let window = Duration::from_secs(if quick() { 10 } else { 60 });
    let mut t = Table::new(44, 16, true);
    t.note(format!(
        "host_metrics bench: {} ({}), {} s per agent, interval {INTERVAL_S} s, {} CPUs",
        binary(),
        if quick() { "quick" } else { "full" },
        window.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    let host = measure(
        &format!("[sources.bench]\ntype = \"host_metrics\"\ninterval = \"{INTERVAL_S}s\"\n"),
        window,
        |_| {},
    );
    // The baseline appends as many events a second, of about the size of a
    // point's (a 600-byte line), so the log and the sink do the same work.
    let per_second = (host.points / host.seconds).round().max(1.0) as usize;
    let line = format!("{}\n", "x".repeat(599));
    let base = measure(
        "[sources.bench]\ntype = \"file\"\ninclude = [\"{dir}/in.log\"]\nstart_at = \"beginning\"\n",
        window,
        |dir| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("in.log"))
                .expect("open the baseline's input");
            let _ = f.write_all(line.repeat(per_second).as_bytes());
        },
    );
    // And an agent with nothing to do: what any appending source adds.
    let idle = measure(
        "[sources.bench]\ntype = \"file\"\ninclude = [\"{dir}/none/*.log\"]\n",
        window,
        |_| {},
    );
    let collections = host.seconds / INTERVAL_S;
    let per_collection_ms = host.thread_cpu_s / collections * 1e3;
    let points = host.points / collections;
    let extra_cpu_s = (host.cpu_s - base.cpu_s * host.seconds / base.seconds).max(0.0);
    let extra_per_collection_ms = extra_cpu_s / collections * 1e3;
    let share = |ms: f64| ms / 1e3 / DEFAULT_INTERVAL_S * 100.0;

    t.head("collection (collector thread: /proc, /sys, the batch)");
    t.row(
        "points per collection",
        format!("{points:.0}"),
        String::new(),
        None,
    );
    t.row(
        "CPU per collection",
        format!("{per_collection_ms:.3} ms"),
        String::new(),
        None,
    );
    t.row(
        "CPU per point",
        format!("{:.2} µs", per_collection_ms * 1e3 / points.max(1.0)),
        String::new(),
        None,
    );
    t.row(
        "share of a core at 30 s",
        format!("{:.4} %", share(per_collection_ms)),
        "< 0.1 %".into(),
        Some(share(per_collection_ms) < 0.1),
    );
    t.head("whole process beyond a file source appending as many events");
    t.row(
        "CPU per collection",
        format!("{extra_per_collection_ms:.3} ms"),
        String::new(),
        None,
    );
    t.row(
        "share of a core at 30 s",
        format!("{:.4} %", share(extra_per_collection_ms)),
        "< 0.1 %".into(),
        Some(share(extra_per_collection_ms) < 0.1),
    );
    let extra_rss = (host.rss_kib - base.rss_kib) / 1024.0;
    t.row(
        "RSS beyond the baseline",
        format!("{extra_rss:.2} MiB"),
        "< 1 MiB".into(),
        Some(extra_rss < 1.0),
    );
    t.row(
        "RSS beyond an idle agent",
        format!("{:.2} MiB", (host.rss_kib - idle.rss_kib) / 1024.0),
        "(for context)".into(),
        None,
    );
    t.detail(format!(
        "idle agent: RSS {:.1} MiB; baseline: {:.3} s CPU in {:.0} s, RSS {:.1} MiB; host_metrics: {:.3} s CPU ({:.3} s in the collector thread), RSS {:.1} MiB, {:.0} points",
        idle.rss_kib / 1024.0,
        base.cpu_s,
        base.seconds,
        base.rss_kib / 1024.0,
        host.cpu_s,
        host.thread_cpu_s,
        host.rss_kib / 1024.0,
        host.points
    ));
    t.print();
}
