//! Phase 1: file -> log -> elasticsearch.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::agent::{http_get, metric, wait_until, Agent};
use crate::config::{es_sink, file_source, log_section};
use crate::input::Corpus;
use crate::measure::dir_bytes;
use crate::receiver::Receiver;
use crate::syslog_ng_bulk::FileFigures;
use crate::table::Table;
use crate::throughput::{throughput_rows, TARGET_LINES_PER_S};

pub(crate) fn file_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) -> FileFigures {
    table.head("file -> log (fsync = always) -> elasticsearch");
    eprintln!("phase file -> elasticsearch ...");
    let dir = root.join("file-phase");
    receiver.reset(true);
    let recv_cpu0 = receiver.cpu_s();
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut agent = Agent::spawn(&dir, &body);
    let mut peak_log = 0;
    let log_dir = dir.join("data/log");
    let mut last_du = Instant::now();
    // The sink's requests in flight and its adaptive limit, sampled: what
    // the throughput figure owes to the sink's concurrency.
    let api = agent.api;
    let (mut in_flight, mut limit, mut samples) = (0.0, 0.0, 0u32);
    let mut last_poll = Instant::now();
    wait_until("every line at the receiver", &mut agent, || {
        if last_du.elapsed() > Duration::from_millis(500) {
            peak_log = peak_log.max(dir_bytes(&log_dir));
            last_du = Instant::now();
        }
        if last_poll.elapsed() > Duration::from_millis(100) {
            if let Some((200, text)) = http_get(api, "/metrics") {
                in_flight += metric(&text, "holdfast_sink_in_flight_requests");
                limit += metric(&text, "holdfast_sink_concurrency_limit");
                samples += 1;
            }
            last_poll = Instant::now();
        }
        receiver.stats.es_docs.load(Ordering::Relaxed) >= c.lines
    });
    let secs = agent.spawned.elapsed().as_secs_f64();
    let p = agent.sample();
    let m = agent.metrics();
    let recv_cpu = receiver.cpu_s() - recv_cpu0;
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    throughput_rows(
        table,
        "lines",
        c.lines,
        c.bytes,
        secs,
        p,
        Some(TARGET_LINES_PER_S),
        &m,
        &agent.rss,
        "spawn",
        crate::throughput::TARGET_WRITE_AMP_LINES,
    );
    table.detail(format!(
        "  the receiver: {} documents in {} requests, {:.1} MiB of _bulk bodies, {:.1} s CPU; largest log on disk seen {:.0} MiB",
        receiver.stats.es_docs.load(Ordering::Relaxed),
        receiver.stats.requests.load(Ordering::Relaxed),
        receiver.stats.body_bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        recv_cpu,
        peak_log as f64 / (1 << 20) as f64
    ));
    if samples > 0 {
        table.detail(format!(
            "  the sink's requests in flight, sampled every 100 ms: {:.2} on average, under an adaptive limit of {:.2} on average",
            in_flight / samples as f64,
            limit / samples as f64
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let docs = receiver.stats.es_docs.load(Ordering::Relaxed).max(1) as f64;
    FileFigures {
        lines_per_s: c.lines as f64 / secs,
        receiver_cpu_per_doc_us: recv_cpu * 1e6 / docs,
        body_bytes_per_doc: receiver.stats.body_bytes.load(Ordering::Relaxed) as f64 / docs,
    }
}
