//! Phase 3: restart with a backlog.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::agent::{http_get, metric, wait_until, Agent};
use crate::config::{es_sink, file_source, log_section};
use crate::envelope::envelope_breakdown;
use crate::input::Corpus;
use crate::measure::dir_bytes;
use crate::receiver::Receiver;
use crate::table::{thousands, Table};
use crate::throughput::TARGET_PEAK_RSS_MIB;

pub(crate) fn restart_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "restart with a backlog of {:.0} MiB of lines (file -> elasticsearch)",
        c.bytes as f64 / (1 << 20) as f64
    ));
    eprintln!("phase restart with a backlog: filling the log ...");
    let dir = root.join("restart-phase");
    receiver.reset(false);
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut agent = Agent::spawn(&dir, &body);
    let t = Instant::now();
    let api = agent.api;
    let mut m = String::new();
    wait_until("every line in the log", &mut agent, || {
        std::thread::sleep(Duration::from_millis(100));
        m = http_get(api, "/metrics").map(|r| r.1).unwrap_or_default();
        metric(&m, "holdfast_log_appended_events_total") >= c.lines as f64
    });
    let fill = t.elapsed().as_secs_f64();
    let p_fill = agent.sample();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    assert_eq!(receiver.stats.es_docs.load(Ordering::Relaxed), 0);
    let backlog = dir_bytes(&dir.join("data/log"));
    table.row(
        "filling: lines/s into the log (receiver answering 503)",
        format!(
            "{}  ({fill:.1} s, {:.0} MiB in the log, {:.2} bytes written per input byte)",
            thousands(c.lines as f64 / fill),
            backlog as f64 / (1 << 20) as f64,
            p_fill.write_bytes as f64 / c.bytes as f64
        ),
        String::new(),
        None,
    );
    let per_line = backlog as f64 / c.lines as f64;
    table.row(
        "a 256 MiB log holds (Loghub lines, from the backlog's bytes per line)",
        format!(
            "{} lines  ({per_line:.1} bytes of log per line, {:.3} per input byte)",
            thousands((256u64 << 20) as f64 / per_line),
            backlog as f64 / c.bytes as f64
        ),
        ">= 10,000,000".into(),
        Some((256u64 << 20) as f64 / per_line >= 10_000_000.0),
    );
    table.detail(format!(
        "  filling: peak RSS {:.1} MiB ({})",
        p_fill.hwm_kib as f64 / 1024.0,
        agent.rss.describe()
    ));
    envelope_breakdown(table, &dir.join("data/log"), Some(input));

    eprintln!("  restarting with the receiver accepting ...");
    receiver.reset(true);
    let mut agent = Agent::spawn_config(&dir, &dir.join("holdfast.toml"), api);
    let spawned = agent.spawned;
    let mut ready = None;
    let mut polled = Instant::now();
    wait_until("the first document at the receiver", &mut agent, || {
        if ready.is_none() && polled.elapsed() > Duration::from_millis(5) {
            if http_get(api, "/readyz").is_some_and(|(s, _)| s == 200) {
                ready = Some(spawned.elapsed());
            }
            polled = Instant::now();
        }
        receiver.first_accept().is_some()
    });
    let first = receiver.first_accept().unwrap() - spawned;
    table.row(
        "restart to first delivery (spawn to first 201)",
        format!(
            "{:.0} ms  (/readyz 200 after {})",
            first.as_secs_f64() * 1000.0,
            ready.map_or("-".into(), |r| format!(
                "{:.0} ms",
                r.as_secs_f64() * 1000.0
            ))
        ),
        String::new(),
        None,
    );
    wait_until("the whole backlog at the receiver", &mut agent, || {
        receiver.stats.es_docs.load(Ordering::Relaxed) >= c.lines
    });
    let secs = agent.spawned.elapsed().as_secs_f64();
    let p = agent.sample();
    let m = agent.metrics();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    table.row(
        "draining the backlog: lines/s (no intake)",
        format!(
            "{}  ({secs:.1} s, {:.1} CPU s per million)",
            thousands(c.lines as f64 / secs),
            p.cpu_s / (c.lines as f64 / 1e6),
        ),
        String::new(),
        None,
    );
    let rss_mib = p.hwm_kib as f64 / 1024.0;
    table.row(
        "draining: peak RSS (VmHWM)",
        format!("{rss_mib:.1} MiB  ({})", agent.rss.describe()),
        format!("<= {TARGET_PEAK_RSS_MIB} MiB"),
        Some(rss_mib <= TARGET_PEAK_RSS_MIB),
    );
    let reqs = metric(&m, "holdfast_sink_requests_total");
    table.detail(format!(
        "  the sink after the restart: {:.0} requests ({:.0} events each)",
        reqs,
        metric(&m, "holdfast_sink_sent_events_total") / reqs.max(1.0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
