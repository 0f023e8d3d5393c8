//! Phase 2: OTLP/HTTP -> log -> otlp_http.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::agent::{free_port, http_get, wait_until, Agent};
use crate::config::{log_section, sink_tuning};
use crate::envelope::envelope_breakdown;
use crate::otlp_clients::{otlp_pool, run_clients, CLIENTS, POOL, RECORDS_PER_REQUEST};
use crate::receiver::Receiver;
use crate::table::{thousands, Table};
use crate::throughput::throughput_rows;

pub(crate) fn otlp_phase(
    table: &mut Table,
    root: &Path,
    gib: f64,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head("OTLP/HTTP clients -> log (fsync = always) -> otlp_http");
    eprintln!("phase OTLP -> otlp_http ...");
    let pool = otlp_pool();
    let avg = pool.iter().map(|b| b.len()).sum::<usize>() as f64 / pool.len() as f64;
    let target_bytes = gib * (1u64 << 30) as f64;
    let requests = (target_bytes / avg).ceil().max(1.0) as u64;
    let records = requests * RECORDS_PER_REQUEST as u64;
    let body_bytes: u64 = (0..requests)
        .map(|i| pool[(i % POOL as u64) as usize].len() as u64)
        .sum();
    table.note(format!(
        "  {requests} requests of {RECORDS_PER_REQUEST} records ({avg:.0} bytes each, protobuf, no compression) \
         from {CLIENTS} keep-alive clients on one thread: {} records, {:.1} MiB",
        thousands(records as f64),
        body_bytes as f64 / (1 << 20) as f64
    ));
    let dir = root.join("otlp-phase");
    receiver.reset(true);
    let recv_cpu0 = receiver.cpu_s();
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let body = log_section(body_bytes * 6 + (1 << 30))
        + &format!("[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{listen}\"\n\n")
        + &format!(
            "[sinks.collector]\ntype = \"otlp_http\"\ninputs = [\"otlp\"]\nendpoint = \"http://{}\"\n{}\n",
            receiver.addr,
            sink_tuning(gzip)
        );
    let mut agent = Agent::spawn(&dir, &body);
    let api = agent.api;
    wait_until("the agent to be ready", &mut agent, || {
        http_get(api, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    let ready = agent.spawned.elapsed();
    let t0 = Instant::now();
    let p0 = agent.sample();
    let clients = std::thread::spawn(move || run_clients(listen, pool, requests));
    wait_until("every record at the receiver", &mut agent, || {
        receiver.stats.otlp_records.load(Ordering::Relaxed) >= records
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut p = agent.sample();
    let m = agent.metrics();
    let recv_cpu = receiver.cpu_s() - recv_cpu0;
    let c = clients.join().unwrap();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    // Start-up is not what this phase measures: the clock starts when the
    // clients do, and CPU and writes are counted from there.
    p.cpu_s -= p0.cpu_s;
    p.write_bytes -= p0.write_bytes;
    p.cancelled_write_bytes -= p0.cancelled_write_bytes;
    table.note(format!(
        "  (clock from the first request, {:.0} ms after spawn when /readyz answered)",
        ready.as_secs_f64() * 1000.0
    ));
    throughput_rows(
        table,
        "records",
        records,
        body_bytes,
        secs,
        p,
        None,
        &m,
        &agent.rss,
        "first request",
        crate::throughput::TARGET_WRITE_AMP_OTLP,
    );
    table.detail(format!(
        "  the clients: {} requests, {} refused and resent, {:.1} s CPU; the receiver: {} records in {} requests, {:.1} MiB, {:.1} s CPU",
        c.requests,
        c.refused,
        c.cpu_s,
        receiver.stats.otlp_records.load(Ordering::Relaxed),
        receiver.stats.requests.load(Ordering::Relaxed),
        receiver.stats.body_bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        recv_cpu
    ));
    envelope_breakdown(table, &dir.join("data/log"), None);
    let _ = std::fs::remove_dir_all(&dir);
}
