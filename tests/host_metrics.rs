//! The `host_metrics` source end to end: the real binary reads this
//! machine's `/proc` and `/sys` every second into the log, a `file` sink
//! writes the points out, and the test compares them with what it reads
//! from `/proc` itself at about the same time.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use file_sink_out::{lines, string_attr};
use serde_json::Value;

const CONFIG: &str = "[sources.host]\ntype = \"host_metrics\"\ninterval = \"1s\"\n\n\
    [sinks.out]\ntype = \"file\"\ninputs = [\"host\"]\n";

/// One point as the file sink wrote it.
#[derive(Debug, Clone)]
struct Point {
    name: String,
    unit: String,
    /// `counter`, `updowncounter` or `gauge`.
    kind: &'static str,
    attrs: BTreeMap<String, String>,
    value: f64,
    time: u64,
    start: u64,
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.parse().ok())
}

fn point(line: &Value) -> Point {
    let r = &line["record"];
    let (kind, data) = if let Some(s) = r.get("sum") {
        let kind = if s["isMonotonic"].as_bool() == Some(true) {
            "counter"
        } else {
            "updowncounter"
        };
        (kind, s)
    } else {
        ("gauge", &r["gauge"])
    };
    let p = &data["dataPoints"][0];
    let attrs = p["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let v = &kv["value"];
            let s = v
                .get("stringValue")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| {
                    v.get("intValue")
                        .map(|i| i.as_str().map_or(i.to_string(), str::to_string))
                })
                .unwrap_or_default();
            (kv["key"].as_str().unwrap_or_default().to_string(), s)
        })
        .collect();
    let value = p.get("asDouble").or(p.get("asInt")).and_then(number);
    Point {
        name: r["name"].as_str().unwrap_or_default().to_string(),
        unit: r["unit"].as_str().unwrap_or_default().to_string(),
        kind,
        attrs,
        value: value.unwrap_or(f64::NAN),
        time: number(&p["timeUnixNano"]).unwrap_or(0.0) as u64,
        start: p.get("startTimeUnixNano").and_then(number).unwrap_or(0.0) as u64,
    }
}

/// Every point written so far, with the collection (point time) it
/// belongs to.
fn points(a: &Agent) -> Vec<Point> {
    lines(&a.data_dir().join("out/out"))
        .iter()
        .map(point)
        .collect()
}

/// The points of the collections taken so far, by time, once `n` are
/// complete (the sink writes a collection's points in order; the last one
/// may be half written).
fn collections(a: &Agent, n: usize) -> BTreeMap<u64, Vec<Point>> {
    wait_for(&format!("{n} collections"), Duration::from_secs(30), || {
        let mut by_time: BTreeMap<u64, Vec<Point>> = BTreeMap::new();
        for p in points(a) {
            by_time.entry(p.time).or_default().push(p);
        }
        // Complete: a later collection exists.
        (by_time.len() > n).then(|| {
            let last = *by_time.keys().next_back().unwrap();
            by_time.remove(&last);
            by_time
        })
    })
}

fn proc_file(rel: &str) -> String {
    std::fs::read_to_string(format!("/proc/{rel}")).unwrap()
}

fn meminfo(key: &str) -> u64 {
    proc_file("meminfo")
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// `cpuN` → the ten counters of its `/proc/stat` line, in clock ticks.
fn cpu_ticks() -> BTreeMap<String, Vec<u64>> {
    proc_file("stat")
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next().unwrap()[3..].to_string();
            (cpu, f.map(|v| v.parse().unwrap()).collect())
        })
        .collect()
}

fn one<'a>(c: &'a [Point], name: &str, attrs: &[(&str, &str)]) -> &'a Point {
    let found: Vec<&Point> = c
        .iter()
        .filter(|p| {
            p.name == name
                && attrs
                    .iter()
                    .all(|(k, v)| p.attrs.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {attrs:?}: {found:?}");
    found[0]
}

#[test]
fn host_metrics_agree_with_proc() {
    let ticks = procfs::ticks_per_second() as f64;
    let before = cpu_ticks();
    let mut a = Agent::new(CONFIG);
    a.start();
    a.wait_ready();
    let all = collections(&a, 2);
    let after = cpu_ticks();
    let (first_time, first) = all.iter().next().unwrap();

    // The names this machine must have (a kernel without PSI or thermal
    // zones has none of those, so they are not asked for).
    let names: BTreeSet<&str> = first.iter().map(|p| p.name.as_str()).collect();
    for name in [
        "system.cpu.time",
        "system.cpu.logical.count",
        "system.cpu.load_average.1m",
        "system.cpu.load_average.5m",
        "system.cpu.load_average.15m",
        "system.memory.usage",
        "system.memory.limit",
        "system.memory.utilization",
        "system.paging.usage",
        "system.paging.operations",
        "system.paging.faults",
        "system.disk.io",
        "system.disk.operations",
        "system.disk.io_time",
        "system.disk.operation_time",
        "system.uptime",
        "system.process.count",
        "system.process.created",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    // Every metric this machine produced is in the docs' tables, with its
    // unit (the Prometheus names the lead's sinks derive come from these).
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sources-host-metrics.md"),
    )
    .unwrap();
    for p in first {
        let row = format!("| `{}` | `{}` |", p.name, p.unit);
        assert!(
            docs.contains(&row),
            "docs/sources-host-metrics.md has no row {row}"
        );
    }
    let psi = std::path::Path::new("/proc/pressure/io").exists();
    assert_eq!(
        names.contains("system.io.linux.pressure.total"),
        psi,
        "{names:?}"
    );

    // Everything of a collection has its time; cumulative sums start at boot.
    let btime: u64 = proc_file("stat")
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for p in first {
        assert_eq!(p.time, *first_time);
        match p.kind {
            "gauge" => assert_eq!(p.start, 0, "{p:?}"),
            _ => assert_eq!(p.start, btime * 1_000_000_000, "{p:?}"),
        }
    }

    // Resource: job="holdfast", instance=<host> once in Prometheus.
    let line = &lines(&a.data_dir().join("out/out"))[0];
    let host = proc_file("sys/kernel/hostname").trim().to_string();
    assert_eq!(
        string_attr(&line["resource"], "service.name").as_deref(),
        Some("holdfast")
    );
    assert_eq!(
        string_attr(&line["resource"], "service.instance.id"),
        Some(host.clone())
    );
    assert_eq!(string_attr(&line["resource"], "host.name"), Some(host));

    // Memory: the states add up to MemTotal, exactly.
    let total = meminfo("MemTotal") as f64;
    let usage: f64 = first
        .iter()
        .filter(|p| p.name == "system.memory.usage")
        .map(|p| p.value)
        .sum();
    assert_eq!(usage, total);
    let limit = one(first, "system.memory.limit", &[]);
    assert_eq!(
        (limit.value, limit.unit.as_str(), limit.kind),
        (total, "By", "updowncounter")
    );

    // CPU time: between the test's readings before and after, per mode and
    // CPU, and never going back.
    let modes = [
        ("user", 0),
        ("system", 2),
        ("idle", 3),
        ("iowait", 4),
        ("interrupt", 5),
    ];
    for (cpu, b) in &before {
        for (mode, col) in modes {
            let p = one(
                first,
                "system.cpu.time",
                &[("cpu.mode", mode), ("cpu.logical_number", cpu)],
            );
            assert_eq!((p.unit.as_str(), p.kind), ("s", "counter"));
            let (lo, hi) = (b[col] as f64 / ticks, after[cpu][col] as f64 / ticks);
            assert!(
                lo - 1e-9 <= p.value && p.value <= hi + 1e-9,
                "cpu{cpu} {mode}: {} not within [{lo}, {hi}]",
                p.value
            );
        }
    }
    let mut last: BTreeMap<BTreeMap<String, String>, f64> = BTreeMap::new();
    for c in all.values() {
        for p in c.iter().filter(|p| p.name == "system.cpu.time") {
            let was = last.insert(p.attrs.clone(), p.value).unwrap_or(0.0);
            assert!(p.value >= was, "{p:?} went back from {was}");
        }
    }

    // File systems: each size is what statvfs says.
    for p in first.iter().filter(|p| p.name == "system.filesystem.limit") {
        let mp = &p.attrs["system.filesystem.mountpoint"];
        let s = rustix::fs::statvfs(mp.as_str()).unwrap();
        assert_eq!(p.value, (s.f_blocks * s.f_frsize) as f64, "{mp}");
        assert_eq!(p.unit, "By");
    }
    // Interfaces: lo is left out by default, the others are there.
    let ifaces: BTreeSet<&str> = first
        .iter()
        .filter(|p| p.name == "system.network.io")
        .map(|p| p.attrs["network.interface.name"].as_str())
        .collect();
    assert!(!ifaces.contains("lo"), "{ifaces:?}");
    let dev = proc_file("net/dev");
    for l in dev.lines().skip(2) {
        let name = l.split(':').next().unwrap().trim();
        assert_eq!(ifaces.contains(name), name != "lo", "{name}: {ifaces:?}");
    }
    // Nothing failed.
    assert_eq!(
        a.metric("holdfast_host_metrics_errors_total{source=\"host\",collector=\"cpu\"}"),
        Some(0.0)
    );
    a.stop();
}

#[test]
fn collections_go_on_after_kill_9() {
    let mut a = Agent::new(CONFIG);
    a.start();
    a.wait_ready();
    let before = collections(&a, 2).len();
    a.kill9();
    a.start();
    a.wait_ready();
    // Collections taken after the restart arrive: the log opened and the
    // source runs again.
    let after = collections(&a, before + 2);
    assert!(after.len() >= before + 2);
    let times: Vec<u64> = after.keys().copied().collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    a.stop();
}

#[test]
fn check_describes_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("holdfast.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n{CONFIG}\n[sources.host.network]\ninterfaces_include = [\"eth*\"]\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let out = holdfast(&["check", "--config", config.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("host (host_metrics)"), "{stdout}");
    assert!(
        stdout.contains("collects cpu, load, memory, paging, pressure, disk, filesystem, network, thermal, system, processes from /proc and /sys every 1s"),
        "{stdout}"
    );
    assert!(stdout.contains("interfaces: only eth*"), "{stdout}");
}
