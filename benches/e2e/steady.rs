//! Phase `steady`: a paced writer appends Loghub lines to one file at
//! `HOLDFAST_E2E_STEADY_RATE` lines/s (default 10,000) for
//! `HOLDFAST_E2E_STEADY_SECS` seconds (default 20) while the agent tails it
//! into `elasticsearch`: the footprint of an agent that keeps up, as most
//! edge devices run it, rather than of one racing through a backlog.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::agent::{wait_until, Agent};
use crate::config::{es_sink, file_source, log_section};
use crate::input::loghub_lines;
use crate::receiver::Receiver;
use crate::table::{thousands, Table};
use crate::throughput::TARGET_STEADY_RSS_MIB;

/// Lines are written in this many bursts a second, as an application's
/// buffered writes would arrive.
const TICKS_PER_S: u64 = 100;

pub(crate) fn steady_phase(table: &mut Table, root: &Path, receiver: &Receiver, gzip: bool) {
    let rate = crate::env_f64("HOLDFAST_E2E_STEADY_RATE", 10_000.0).max(100.0) as u64;
    let secs = crate::env_f64("HOLDFAST_E2E_STEADY_SECS", 20.0).max(2.0);
    table.head(&format!(
        "steady {} lines/s for {secs:.0} s (file -> log (fsync = always) -> elasticsearch)",
        thousands(rate as f64)
    ));
    eprintln!("phase steady ...");
    let dir = root.join("steady-phase");
    let input = dir.join("input");
    std::fs::create_dir_all(&input).unwrap();
    let path = input.join("app.log");
    let mut file = std::fs::File::create(&path).unwrap();
    receiver.reset(true);
    let body = log_section(1 << 30) + &file_source(&input) + &es_sink(receiver.addr, gzip);
    let mut agent = Agent::spawn(&dir, &body);

    let unit = loghub_lines();
    let per_tick = rate / TICKS_PER_S;
    let ticks = (secs * TICKS_PER_S as f64) as u64;
    let start = Instant::now();
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut buf = Vec::with_capacity(256 << 10);
    for tick in 0..ticks {
        // Paced against the start, not the last write, so a late tick is
        // caught up rather than lost.
        let due = start + Duration::from_secs_f64(tick as f64 / TICKS_PER_S as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        buf.clear();
        for _ in 0..per_tick {
            let line = &unit[(n % unit.len() as u64) as usize];
            write!(buf, "{n:010} ").unwrap();
            buf.extend_from_slice(line);
            buf.push(b'\n');
            n += 1;
        }
        file.write_all(&buf).unwrap();
        bytes += buf.len() as u64;
        agent.check_alive();
    }
    let written = start.elapsed().as_secs_f64();
    wait_until("every steady line at the receiver", &mut agent, || {
        receiver.stats.es_docs.load(Ordering::Relaxed) >= n
    });
    let behind = start.elapsed().as_secs_f64() - written;
    let p = agent.sample();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    table.row(
        "lines written (rate achieved by the writer)",
        format!(
            "{}  ({} lines/s, {:.1} MiB; the last at the receiver {:.0} ms after the last write)",
            thousands(n as f64),
            thousands(n as f64 / written),
            bytes as f64 / (1 << 20) as f64,
            behind * 1000.0
        ),
        String::new(),
        None,
    );
    table.row(
        "CPU s per million lines (agent, user+sys)",
        format!(
            "{:.2}  ({:.1} s in all, {:.1}% of one core)",
            p.cpu_s / (n as f64 / 1e6),
            p.cpu_s,
            p.cpu_s / written * 100.0
        ),
        String::new(),
        None,
    );
    // The kernel moves VmHWM up only at some events (an unmap, the
    // process's exit), so a polled VmRSS can exceed it: the peak judged
    // is the larger of the two.
    let rss_mib = (p.hwm_kib as f64 / 1024.0).max(agent.rss.settled_mib());
    table.row(
        "peak RSS (VmHWM, or VmRSS polled every 20 ms if higher)",
        format!("{rss_mib:.1} MiB  ({})", agent.rss.describe()),
        format!("<= {TARGET_STEADY_RSS_MIB} MiB"),
        Some(rss_mib <= TARGET_STEADY_RSS_MIB),
    );
    table.row(
        "peak RSS once started (VmRSS after the first 3 s)",
        format!(
            "{:.1} MiB  (the peak above less the start-up's)",
            agent.rss.settled_mib()
        ),
        String::new(),
        None,
    );
    table.row(
        "functions of packaging/hot-text.order in the binary",
        hot_text_coverage(),
        String::new(),
        None,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many of the functions `packaging/hot-text.order` lists the binary
/// under test has: the names carry hashes that move with the code, and a
/// hot function the linker no longer finds there lands outside the packed
/// region (a 64 KiB window of resident text for each). A low share says
/// to run `packaging/hot-text.sh` again.
fn hot_text_coverage() -> String {
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/hot-text.order");
    let Ok(order) = std::fs::read_to_string(&order) else {
        return "no packaging/hot-text.order".into();
    };
    let nm = std::process::Command::new("nm")
        .arg("--defined-only")
        .arg(crate::bin())
        .output();
    let Some(nm) = nm.ok().filter(|o| o.status.success()) else {
        return "unknown (nm failed: apt-get install binutils)".into();
    };
    let text = String::from_utf8_lossy(&nm.stdout);
    let names: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let listed: Vec<&str> = order.lines().filter(|l| !l.is_empty()).collect();
    let found = listed.iter().filter(|n| names.contains(*n)).count();
    format!(
        "{found} of {}{}",
        listed.len(),
        if found * 100 < listed.len() * 98 {
            "  (stale: run packaging/hot-text.sh)"
        } else {
            ""
        }
    )
}
