//! `cpu` (`/proc/stat`: time per mode per logical CPU) and `load`
//! (`/proc/loadavg`).

use procfs::FromRead;

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

/// `/proc/stat`'s columns after `cpuN`, in order, and the `cpu.mode` each
/// is counted as. `guest` and `guest_nice` are left out: the kernel
/// already counts them in `user` and `nice`. `irq` is semconv's
/// `interrupt`; semconv has no value for softirq, so it keeps the kernel's
/// name (the Collector's hostmetrics receiver does the same).
const MODES: [Option<&str>; 10] = [
    Some("user"),
    Some("nice"),
    Some("system"),
    Some("idle"),
    Some("iowait"),
    Some("interrupt"),
    Some("softirq"),
    Some("steal"),
    None,
    None,
];

pub(super) fn cpu(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let ticks = host.ticks as f64;
    let (path, text) = host.read("proc/stat")?;
    let mut logical = 0;
    let mut t = out.metric("system.cpu.time", "s", Kind::Counter);
    for line in text.lines() {
        // "cpu " is the sum of all; per-CPU lines are "cpuN".
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut fields = rest.split_ascii_whitespace();
        let Some(n) = fields.next().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        logical += 1;
        for (mode, v) in MODES.iter().zip(fields) {
            let v: u64 = v
                .parse()
                .map_err(|_| Failure::parse(&path, format!("cpu{n}: {v:?} is not a tick count")))?;
            if let Some(mode) = mode {
                t.double(
                    &[
                        ("cpu.mode", Attr::Str(mode)),
                        ("cpu.logical_number", Attr::Int(n)),
                    ],
                    v as f64 / ticks,
                );
            }
        }
    }
    if logical == 0 {
        return Err(Failure::parse(&path, "no cpuN line"));
    }
    out.metric("system.cpu.logical.count", "{cpu}", Kind::UpDownCounter)
        .int(&[], logical);
    Ok(())
}

pub(super) fn load(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let (path, text) = host.read("proc/loadavg")?;
    let l =
        procfs::LoadAverage::from_read(text.as_bytes()).map_err(|e| Failure::parse(&path, e))?;
    for (name, v) in [
        ("system.cpu.load_average.1m", l.one),
        ("system.cpu.load_average.5m", l.five),
        ("system.cpu.load_average.15m", l.fifteen),
    ] {
        out.metric(name, "{thread}", Kind::Gauge)
            .double(&[], f64::from(v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::Collector;

    #[test]
    fn cpu_time_is_seconds_per_mode_per_logical_cpu() {
        let f = Fixture::new().file(
            "proc/stat",
            "cpu  300 20 100 4000 50 7 3 1 0 0\n\
             cpu0 100 10 50 2000 25 4 2 1 0 0\n\
             cpu2 200 10 50 2000 25 3 1 0 9 9\n\
             intr 1 2 3\nctxt 5\nbtime 1700000000\nprocesses 42\n\
             procs_running 2\nprocs_blocked 1\n",
        );
        let p = f.collect(Collector::Cpu);
        let ticks = procfs::ticks_per_second() as f64;
        // cpu2: CPU 1 is offline; the number is the kernel's, not a count.
        assert_eq!(
            p.value(
                "system.cpu.time",
                &[("cpu.mode", "user"), ("cpu.logical_number", "2")]
            ),
            200.0 / ticks
        );
        assert_eq!(
            p.value(
                "system.cpu.time",
                &[("cpu.mode", "interrupt"), ("cpu.logical_number", "0")]
            ),
            4.0 / ticks
        );
        assert_eq!(
            p.value(
                "system.cpu.time",
                &[("cpu.mode", "softirq"), ("cpu.logical_number", "2")]
            ),
            1.0 / ticks
        );
        // 8 modes × 2 CPUs; guest and guest_nice are in user and nice already.
        assert_eq!(p.points("system.cpu.time").len(), 16);
        assert_eq!(p.unit("system.cpu.time"), "s");
        assert_eq!(p.kind("system.cpu.time"), "counter");
        assert_eq!(p.value("system.cpu.logical.count", &[]), 2.0);
        assert_eq!(p.start("system.cpu.time"), 1_700_000_000_000_000_000);
    }

    #[test]
    fn load_averages_are_three_gauges() {
        let f = Fixture::new().file("proc/loadavg", "0.52 1.25 2.00 3/512 12345\n");
        let p = f.collect(Collector::Load);
        assert_eq!(p.value("system.cpu.load_average.1m", &[]), 0.52f32 as f64);
        assert_eq!(p.value("system.cpu.load_average.5m", &[]), 1.25);
        assert_eq!(p.value("system.cpu.load_average.15m", &[]), 2.0);
        assert_eq!(p.kind("system.cpu.load_average.15m"), "gauge");
        assert_eq!(p.unit("system.cpu.load_average.1m"), "{thread}");
    }

    #[test]
    fn a_damaged_stat_is_broken_not_absent() {
        let f = Fixture::new().file("proc/stat", "cpu0 1 2 x\nbtime 1\n");
        let e = f.collect_err(Collector::Cpu);
        assert!(e.to_string().contains("is not a tick count"), "{e}");
    }
}
