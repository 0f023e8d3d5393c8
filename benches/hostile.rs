//! Peak memory under hostile OTLP/HTTP bodies (issue 26): the real binary on
//! loopback, its peak resident memory (VmHWM) idle and after each attack.
//!
//! ```text
//! cargo bench --bench hostile                                   # this build
//! HOLDFAST_BENCH_BIN=/work/base/target/release/holdfast \
//!     cargo bench --bench hostile                               # another build
//! ```
//!
//! Not a pass/fail test: it prints one table. Each attack gets a fresh
//! daemon (default settings, one `otlp_http` source), which first serves one
//! normal request so that the idle figure includes what serving costs:
//!
//! * `8 MB plain`: one protobuf `ExportLogsServiceRequest` of 8,380,012
//!   bytes naming 4,190,000 empty log records, ending in a truncated field;
//! * `7 x 8 KB gzip`: the same body gzip-compressed (about 8 KB), from seven
//!   connections at once.
//!
//! Printed per attack: the statuses answered, VmHWM idle and after, the
//! growth, and whether the daemon then served a normal request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bin() -> String {
    std::env::var("HOLDFAST_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_holdfast").into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn vm_hwm(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmHWM")
        << 10
}

/// One HTTP/1.1 request on its own connection: the status, or 0 when the
/// connection broke without an answer.
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn post(addr: SocketAddr, content_type: &str, gzip: bool, body: &[u8]) -> u16 {
    let coding = if gzip {
        "Content-Encoding: gzip\r\n"
    } else {
        ""
    };
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: bench\r\nContent-Type: {content_type}\r\n{coding}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    request(addr, &head, body)
}

fn normal_request(addr: SocketAddr) -> u16 {
    let body =
        br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"hello"}}]}]}]}"#;
    post(addr, "application/json", false, body)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// 8,380,012 bytes: 4,190,000 empty log records and a truncated field.
fn empty_records() -> Vec<u8> {
    let scope = [0x12u8, 0x00].repeat(4_190_000);
    let mut resource = vec![0x12];
    varint(scope.len() as u64, &mut resource);
    resource.extend_from_slice(&scope);
    let mut body = vec![0x0a];
    varint(resource.len() as u64, &mut body);
    body.extend_from_slice(&resource);
    body.extend_from_slice(&[0x0a, 0x05]);
    body
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

struct Daemon {
    child: Child,
    otlp: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let otlp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = dir.path().join("holdfast.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\n\n[api]\nlisten = \"{api}\"\n\n[sources.otlp]\n\
                 type = \"otlp_http\"\nlisten = \"{otlp}\"\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin())
            .args(["run", "--config", config.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting holdfast");
        let end = Instant::now() + Duration::from_secs(30);
        let ready = "GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
        while request(api, ready, b"") != 200 {
            assert!(Instant::now() < end, "holdfast did not become ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            child,
            otlp,
            _dir: dir,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one attack on a fresh daemon and prints its row.
fn attack(name: &str, clients: usize, gzipped: bool, body: Vec<u8>) {
    let mut d = Daemon::start();
    assert_eq!(normal_request(d.otlp), 200, "a normal request before");
    let pid = d.child.id();
    let idle = vm_hwm(pid);
    let body = Arc::new(body);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (otlp, body) = (d.otlp, body.clone());
            std::thread::spawn(move || post(otlp, "application/x-protobuf", gzipped, &body))
        })
        .collect();
    let mut statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let took = started.elapsed();
    statuses.sort_unstable();
    let alive = d.child.try_wait().ok().flatten().is_none();
    let after = if alive { vm_hwm(pid) } else { 0 };
    let served = alive && normal_request(d.otlp) == 200;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "| {name:<14} | {:>7} B | {:>9.1} | {:>9.1} | {:>8.1} | {:>7.2} | {:<20} | {:<6} |",
        body.len(),
        mib(idle),
        mib(after),
        mib(after.saturating_sub(idle)),
        took.as_secs_f64(),
        format!("{statuses:?}"),
        if served { "yes" } else { "NO" },
    );
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    format!(
        "{cores} cores, {:.1} GiB memory",
        mem as f64 / (1 << 20) as f64
    )
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    println!("holdfast binary: {}", bin());
    println!("machine: {}", machine());
    println!();
    println!(
        "| attack         | body each | idle MiB  | after MiB | grew MiB | seconds | statuses             | served |"
    );
    println!(
        "|----------------|-----------|-----------|-----------|----------|---------|----------------------|--------|"
    );
    let plain = empty_records();
    let gz = gzip(&plain);
    attack("8 MB plain", 1, false, plain);
    attack("7 x 8 KB gzip", 7, true, gz);
}
