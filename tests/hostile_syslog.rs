//! A syslog source against many senders at once (issue 26): forty machines
//! (127.0.0.2 … 127.0.0.41, each socket bound before it connects) each
//! send messages near `max_message_size` as fast as they can, while the
//! log syncs every append. Every connection used to hold its read buffer
//! and its batch at once, times the connections; now they share one
//! budget, `max_buffer_size`, and wait for room instead.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use daemon::{free_port, holdfast, Agent};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const SENDERS: usize = 40;
const MESSAGES: usize = 2;
/// Near `max_message_size` (512 KiB) and under it, so each is kept whole.
const MESSAGE_BYTES: usize = 500 << 10;
const BUDGET_MIB: u64 = 5;
/// What the daemon may take beyond its idle peak and the budget: each
/// connection's 128 KiB read buffer outside the budget (5 MiB for 40), and
/// the log's append buffers. Measured: +6 to +12 MiB in all; before the budget,
/// +29 to +36 MiB.
const MARGIN_MIB: u64 = 10;
const DEADLINE: Duration = Duration::from_secs(120);

/// A TCP connection to 127.0.0.1:`port` from the address `from`.
async fn connect_from(from: &str, port: u16) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// The daemon's peak resident memory so far, in KiB.
fn vm_hwm_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// How many stored events of `source` start with each tag (`s7-m1`, …).
fn stored_tags(a: &Agent, source: &str) -> HashMap<String, usize> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut tags = HashMap::new();
    for line in std::str::from_utf8(&out.stdout).unwrap().lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        if e["source"] != source {
            continue;
        }
        let body = e["record"]["body"]["stringValue"].as_str().unwrap_or("");
        let tag = body.split(' ').next().unwrap_or("").to_string();
        *tags.entry(tag).or_insert(0) += 1;
    }
    tags
}

/// One sender: its messages as fast as the connection takes them, then
/// the end of its stream; returns once the source has closed the
/// connection, which it does after appending what it read.
async fn send(sender: usize, port: u16) {
    let from = format!("127.0.0.{}", sender + 2);
    let mut s = connect_from(&from, port).await;
    for m in 0..MESSAGES {
        let mut line = Vec::with_capacity(MESSAGE_BYTES + 1);
        line.extend_from_slice(
            format!("<13>1 2026-12-03T10:00:00Z gw{sender} app - - - s{sender}-m{m} ").as_bytes(),
        );
        line.resize(MESSAGE_BYTES, b'x');
        line.push(b'\n');
        s.write_all(&line).await.unwrap();
    }
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_senders_share_one_budget_and_lose_nothing() {
    let port = free_port();
    let mut a = Agent::new(&format!(
        r#"
[log]
fsync = "always"

[sources.lan]
type = "syslog"
listen = "127.0.0.1:{port}"
max_message_size = "512KiB"
max_buffer_size = "{BUDGET_MIB}MiB"
"#
    ));
    a.start();
    a.wait_ready();
    let pid = a.pid();
    let idle = vm_hwm_kib(pid);

    let started = Instant::now();
    let senders: Vec<_> = (0..SENDERS).map(|i| tokio::spawn(send(i, port))).collect();
    for s in senders {
        tokio::time::timeout(DEADLINE, s)
            .await
            .expect("every sender gets through within the deadline")
            .unwrap();
    }
    let peak = vm_hwm_kib(pid);
    eprintln!(
        "{SENDERS} senders × {MESSAGES} × {} KiB in {:?}: VmHWM {idle} KiB idle, {peak} KiB \
         peak (+{} KiB; budget {BUDGET_MIB} MiB, margin {MARGIN_MIB} MiB)",
        MESSAGE_BYTES >> 10,
        started.elapsed(),
        peak - idle
    );
    assert!(
        peak <= idle + (BUDGET_MIB + MARGIN_MIB) * 1024,
        "peak RSS {peak} KiB exceeds idle {idle} KiB + budget {BUDGET_MIB} MiB + margin \
         {MARGIN_MIB} MiB"
    );

    // Every message a sender got onto its connection was appended, once.
    let tags = tokio::task::block_in_place(|| stored_tags(&a, "lan"));
    for sender in 0..SENDERS {
        for m in 0..MESSAGES {
            let tag = format!("s{sender}-m{m}");
            assert_eq!(tags.get(&tag), Some(&1), "{tag} stored once");
        }
    }
    let waits = tokio::task::block_in_place(|| {
        a.metric(r#"holdfast_syslog_budget_waits_total{source="lan"}"#)
    });
    assert!(
        waits.unwrap_or(0.0) >= 1.0,
        "connections waited for the budget: {waits:?}"
    );

    // A normal sender gets through afterwards.
    let mut s = connect_from("127.0.0.50", port).await;
    s.write_all(b"<13>1 2026-12-03T10:00:00Z gw99 app - - - afterwards\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
    let tags = tokio::task::block_in_place(|| stored_tags(&a, "lan"));
    assert_eq!(tags.get("afterwards"), Some(&1));
}
