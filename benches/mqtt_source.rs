//! MQTT source benchmark: local publishers (rumqttc, QoS 1, in this
//! process) through mosquitto into holdfast's log with `fsync = "always"`,
//! beside the same stream into `mosquitto_sub -q 1` writing a file (the
//! broker's own client, no durability): the anchor.
//!
//! ```text
//! cargo bench --bench mqtt_source                          # full run
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench mqtt_source   # smoke run, seconds
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench mqtt_source
//! ```
//!
//! Not a pass/fail test: it prints one line per run. mosquitto (Debian's
//! `mosquitto`) is started by the bench on a free loopback port, without
//! persistence and without a queue limit, so that it is never the one
//! dropping. holdfast runs as its own process (the built binary) with one
//! `mqtt` source (MQTT 5, `receive_maximum` below) and no sink; the run
//! ends when `holdfast_source_events_total` reaches what was published.
//! Reported: messages/s from the first publish to the last message durable
//! (anchor: to the last line written), the subscriber's CPU per message
//! (its `/proc/<pid>/stat` user + system) and its peak RSS (VmHWM).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, Incoming, MqttOptions};

const BIN: &str = env!("CARGO_BIN_EXE_holdfast");
const PUBLISHERS: usize = 8;
const PAYLOAD_BYTES: usize = 120;
const RECEIVE_MAXIMUM: u16 = 1000;
const TARGET_PER_S: f64 = 100_000.0;

fn quick() -> bool {
    std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// CPU seconds (user + system) and peak RSS (MiB) of `pid` so far.
fn usage(pid: u32) -> (f64, f64) {
    let tick = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<&str> = after.split_whitespace().collect();
    let cpu = f.get(11..13).map_or(0.0, |v| {
        v.iter().filter_map(|x| x.parse::<f64>().ok()).sum::<f64>() / tick
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0);
    (cpu, rss)
}

struct Broker {
    child: Child,
    port: u16,
}

impl Broker {
    fn start(dir: &Path) -> Broker {
        let port = free_port();
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 max_queued_messages 0\nmax_inflight_messages {RECEIVE_MAXIMUM}\n\
                 log_dest stderr\nlog_type error\nlog_type warning\n"
            ),
        )
        .unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("mosquitto.log")).unwrap())
            .spawn()
            .expect("mosquitto (apt-get install mosquitto)");
        wait_until("mosquitto to listen", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Broker { child, port }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Publishes `per` QoS 1 messages from each of [`PUBLISHERS`] clients,
/// every PUBACK awaited; returns when the broker acknowledged them all.
fn publish(rt: &tokio::runtime::Runtime, port: u16, per: usize) {
    rt.block_on(async {
        let mut tasks = Vec::new();
        for p in 0..PUBLISHERS {
            tasks.push(tokio::spawn(async move {
                let mut o = MqttOptions::new(format!("bench-pub-{p}"), "127.0.0.1", port);
                o.set_keep_alive(Duration::from_secs(30))
                    .set_outgoing_inflight_upper_limit(200);
                let (client, mut el) = AsyncClient::new(o, 1024);
                let sender = tokio::spawn(async move {
                    let pad = "x".repeat(PAYLOAD_BYTES.saturating_sub(60));
                    for i in 0..per {
                        let payload = format!(
                            "{{\"device\":\"d{p}\",\"seq\":{i},\"t\":21.5,\"pad\":\"{pad}\"}}"
                        );
                        client
                            .publish(
                                format!("devices/d{p}/telemetry"),
                                QoS::AtLeastOnce,
                                false,
                                payload,
                            )
                            .await
                            .expect("publish queued");
                    }
                });
                let mut acked = 0;
                while acked < per {
                    match el.poll().await {
                        Ok(Event::Incoming(Incoming::PubAck(_))) => acked += 1,
                        Ok(_) => {}
                        Err(e) => panic!("publisher {p}: {e}"),
                    }
                }
                sender.await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn metric(api: u16, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", api)).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

fn holdfast_run(rt: &tokio::runtime::Runtime, root: &Path, broker: &Broker, per: usize) {
    let dir = root.join("holdfast");
    std::fs::create_dir_all(&dir).unwrap();
    let api = free_port();
    let config = dir.join("holdfast.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{api}\"\n[log]\nfsync = \"always\"\n\
             [sources.m]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1:{}\"\n\
             topics = [\"devices/+/telemetry\"]\nreceive_maximum = {RECEIVE_MAXIMUM}\n",
            dir.join("data").display(),
            broker.port
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let connected = "holdfast_mqtt_source_connected{source=\"m\"}";
    wait_until("holdfast to subscribe", Duration::from_secs(20), || {
        metric(api, connected) == Some(1.0)
    });
    let total = (per * PUBLISHERS) as f64;
    let (cpu0, _) = usage(child.id());
    let start = Instant::now();
    publish(rt, broker.port, per);
    let events = "holdfast_source_events_total{source=\"m\"}";
    wait_until("every message durable", Duration::from_secs(600), || {
        metric(api, events).is_some_and(|n| n >= total)
    });
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, rss) = usage(child.id());
    println!(
        "{:<28} {:>9.0} msg/s  {:>6.2} µs CPU/msg  peak RSS {:>6.1} MiB  ({} msgs, {PUBLISHERS} publishers, fsync always, receive_maximum {RECEIVE_MAXIMUM}){}",
        "holdfast mqtt source",
        total / secs,
        (cpu1 - cpu0) / total * 1e6,
        rss,
        total,
        if total / secs >= TARGET_PER_S { "" } else { "  BELOW TARGET 100,000/s" }
    );
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

fn anchor_run(rt: &tokio::runtime::Runtime, root: &Path, broker: &Broker, per: usize) {
    let out = root.join("sub.out");
    let mut child = Command::new("mosquitto_sub")
        .args([
            "-p",
            &broker.port.to_string(),
            "-q",
            "1",
            "-t",
            "devices/+/telemetry",
        ])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto_sub (apt-get install mosquitto-clients)");
    // Subscribed once a message published now reaches it.
    let probe = rt.block_on(async {
        let o = MqttOptions::new("bench-probe", "127.0.0.1", broker.port);
        let (c, mut el) = AsyncClient::new(o, 16);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            c.publish("devices/probe/telemetry", QoS::AtLeastOnce, false, "probe")
                .await
                .unwrap();
            loop {
                if let Ok(Event::Incoming(Incoming::PubAck(_))) = el.poll().await {
                    break;
                }
            }
            if std::fs::metadata(&out).is_ok_and(|m| m.len() > 0) || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        count_lines(&out)
    });
    let total = per * PUBLISHERS;
    let (cpu0, _) = usage(child.id());
    let start = Instant::now();
    publish(rt, broker.port, per);
    wait_until(
        "mosquitto_sub to write every message",
        Duration::from_secs(600),
        || count_lines(&out) >= total + probe,
    );
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, rss) = usage(child.id());
    println!(
        "{:<28} {:>9.0} msg/s  {:>6.2} µs CPU/msg  peak RSS {:>6.1} MiB  (anchor: no durability)",
        "mosquitto_sub -q 1 > file",
        total as f64 / secs,
        (cpu1 - cpu0) / total as f64 * 1e6,
        rss,
    );
    let _ = child.kill();
    let _ = child.wait();
}

fn count_lines(p: &Path) -> usize {
    std::fs::File::open(p)
        .map(|f| BufReader::new(f).lines().count())
        .unwrap_or(0)
}

fn main() {
    let root: PathBuf = std::env::var_os("HOLDFAST_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(root).unwrap();
    let per = if quick() { 2_000 } else { 50_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mqtt source: {PUBLISHERS} publishers × {per} QoS 1 messages of ~{PAYLOAD_BYTES} B through mosquitto"
    );
    let broker = Broker::start(tmp.path());
    anchor_run(&rt, tmp.path(), &broker, per);
    holdfast_run(&rt, tmp.path(), &broker, per);
}
