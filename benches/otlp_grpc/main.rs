//! OTLP over gRPC beside OTLP over HTTP, in and out (issue 29), through the
//! real `holdfast` binary (the release build `cargo bench` makes).
//!
//! ```text
//! cargo bench --bench otlp_grpc                                # both parts, a few minutes
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench otlp_grpc         # smoke run, seconds
//! HOLDFAST_BENCH_ONLY=in cargo bench --bench otlp_grpc         # only gRPC in vs HTTP in
//! HOLDFAST_BENCH_ONLY=in HOLDFAST_BENCH_ROUNDS=3 cargo bench --bench otlp_grpc  # in, 3 rounds taking turns
//! HOLDFAST_BENCH_ONLY=in HOLDFAST_BENCH_PAIRS=protobuf cargo bench --bench otlp_grpc  # in, uncompressed pair only
//! HOLDFAST_BENCH_ONLY=out cargo bench --bench otlp_grpc        # only gRPC out vs HTTP out
//! HOLDFAST_BENCH_BIN=/path/to/old/holdfast HOLDFAST_BENCH_ONLY=in cargo bench --bench otlp_grpc  # in, another build
//! ```
//!
//! Not a pass/fail test: it prints two tables.
//!
//! * **In** (`ingest.rs`): an `otlp` source with a gRPC and an HTTP
//!   listener, `fsync = "always"`; the same protobuf request of 100 log
//!   records (benches/common/otlp_request.rs, the one benches/otlp_http.rs
//!   sends) over each, plain and gzipped: records/s, latency, and CPU per
//!   1,000 records of the server (the holdfast process) and of the clients,
//!   side by side, with the ratios gRPC / HTTP.
//! * **Out** (`egress.rs`): an `otlp_grpc` sink and an `otlp_http` sink
//!   draining the same backlog to a receiver that accepts everything:
//!   events/s, MiB/s, the sink process's CPU per 1,000 events and its peak
//!   RSS.
//!
//! The gRPC client and receiver are written by hand on hyper's HTTP/2
//! (`wire.rs`), so that nothing the code under test uses measures it.

#[path = "../../tests/common/daemon.rs"]
mod daemon;
#[path = "../common/otlp_request.rs"]
mod otlp_request;

mod egress;
mod ingest;
mod wire;

/// CPU seconds (user + system) of process `pid` so far.
fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 here.
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// CPU seconds (user + system) of this process so far: the clients.
fn self_cpu() -> f64 {
    proc_cpu(std::process::id())
}

/// Peak RSS (VmHWM) of process `pid`, MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let quick = std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let only = std::env::var("HOLDFAST_BENCH_ONLY").ok();
    if only.as_deref() != Some("out") {
        ingest::run(quick);
    }
    if only.as_deref() != Some("in") {
        egress::run(quick);
    }
}
