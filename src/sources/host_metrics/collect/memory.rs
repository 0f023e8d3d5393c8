//! `memory` (`/proc/meminfo`) and `paging` (`/proc/meminfo`'s swap lines,
//! `/proc/vmstat`).

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

/// The lines of `/proc/meminfo` these collectors read, in bytes.
/// (procfs's own parser insists on lines that kernels and containers
/// such as LXCFS's leave out; these have been there since 2.6.)
#[derive(Debug, Default)]
struct Meminfo {
    mem_total: u64,
    mem_free: u64,
    mem_available: Option<u64>,
    buffers: u64,
    cached: u64,
    s_reclaimable: Option<u64>,
    swap_total: u64,
    swap_free: u64,
}

fn meminfo(host: &mut Host) -> Result<Meminfo, Failure> {
    let (path, text) = host.read("proc/meminfo")?;
    let mut m = Meminfo::default();
    let mut required = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_ascii_whitespace();
        let Some(n) = words.next().and_then(|n| n.parse::<u64>().ok()) else {
            return Err(Failure::parse(&path, format!("{key}: not a number")));
        };
        let bytes = match words.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        };
        let slot = match key {
            "MemTotal" => &mut m.mem_total,
            "MemFree" => &mut m.mem_free,
            "Buffers" => &mut m.buffers,
            "Cached" => &mut m.cached,
            "SwapTotal" => &mut m.swap_total,
            "SwapFree" => &mut m.swap_free,
            "MemAvailable" => {
                m.mem_available = Some(bytes);
                continue;
            }
            "SReclaimable" => {
                m.s_reclaimable = Some(bytes);
                continue;
            }
            _ => continue,
        };
        *slot = bytes;
        required += 1;
    }
    if required < 6 {
        return Err(Failure::parse(
            &path,
            "MemTotal, MemFree, Buffers, Cached, SwapTotal or SwapFree is missing",
        ));
    }
    Ok(m)
}

pub(super) fn memory(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let m = meminfo(host)?;
    let total = m.mem_total;
    // What free(1) calls buff/cache: the page cache and the slab the kernel
    // gives back under pressure. `used` is the rest, so the four states add
    // up to MemTotal exactly.
    let cached = m.cached + m.s_reclaimable.unwrap_or(0);
    let used = total
        .saturating_sub(m.mem_free)
        .saturating_sub(m.buffers)
        .saturating_sub(cached);
    let states = [
        ("used", used),
        ("free", m.mem_free),
        ("buffers", m.buffers),
        ("cached", cached),
    ];
    let mut usage = out.metric("system.memory.usage", "By", Kind::UpDownCounter);
    for (state, v) in states {
        usage.uint(&[("system.memory.state", Attr::Str(state))], v);
    }
    out.metric("system.memory.limit", "By", Kind::UpDownCounter)
        .uint(&[], total);
    if total > 0 {
        let mut util = out.metric("system.memory.utilization", "1", Kind::Gauge);
        for (state, v) in states {
            util.double(
                &[("system.memory.state", Attr::Str(state))],
                v as f64 / total as f64,
            );
        }
    }
    if let Some(available) = m.mem_available {
        out.metric("system.memory.linux.available", "By", Kind::UpDownCounter)
            .uint(&[], available);
    }
    Ok(())
}

pub(super) fn paging(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let m = meminfo(host)?;
    let used = m.swap_total.saturating_sub(m.swap_free);
    let mut usage = out.metric("system.paging.usage", "By", Kind::UpDownCounter);
    usage.uint(&[("system.paging.state", Attr::Str("used"))], used);
    usage.uint(&[("system.paging.state", Attr::Str("free"))], m.swap_free);
    if m.swap_total > 0 {
        let mut util = out.metric("system.paging.utilization", "1", Kind::Gauge);
        for (state, v) in [("used", used), ("free", m.swap_free)] {
            util.double(
                &[("system.paging.state", Attr::Str(state))],
                v as f64 / m.swap_total as f64,
            );
        }
    }

    let (path, text) = host.read("proc/vmstat")?;
    let field = |name: &str| -> Result<u64, Failure> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| Failure::parse(&path, format!("no {name} line")))
    };
    let (swap_in, swap_out) = (field("pswpin")?, field("pswpout")?);
    let (faults, major) = (field("pgfault")?, field("pgmajfault")?);
    out.metric("system.paging.operations", "{operation}", Kind::Counter)
        .uint(&[("system.paging.direction", Attr::Str("in"))], swap_in)
        .uint(&[("system.paging.direction", Attr::Str("out"))], swap_out);
    out.metric("system.paging.faults", "{fault}", Kind::Counter)
        .uint(&[("system.paging.fault.type", Attr::Str("major"))], major)
        .uint(
            &[("system.paging.fault.type", Attr::Str("minor"))],
            faults.saturating_sub(major),
        );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::Collector;

    const MEMINFO: &str = "MemTotal:       16000000 kB\nMemFree:         4000000 kB\n\
        MemAvailable:    9000000 kB\nBuffers:          500000 kB\nCached:          3000000 kB\n\
        SwapCached:            0 kB\nActive:          1 kB\nInactive:        1 kB\n\
        SwapTotal:       2000000 kB\nSwapFree:        1500000 kB\nDirty: 0 kB\n\
        Slab:             800000 kB\nSReclaimable:     600000 kB\nSUnreclaim:       200000 kB\n";

    #[test]
    fn memory_states_add_up_to_mem_total() {
        let p = Fixture::new()
            .file("proc/meminfo", MEMINFO)
            .collect(Collector::Memory);
        let s = |state| p.value("system.memory.usage", &[("system.memory.state", state)]);
        assert_eq!(s("free"), 4_000_000.0 * 1024.0);
        assert_eq!(s("buffers"), 500_000.0 * 1024.0);
        assert_eq!(s("cached"), 3_600_000.0 * 1024.0);
        assert_eq!(s("used"), 7_900_000.0 * 1024.0);
        assert_eq!(
            s("used") + s("free") + s("buffers") + s("cached"),
            16_000_000.0 * 1024.0
        );
        assert_eq!(p.value("system.memory.limit", &[]), 16_000_000.0 * 1024.0);
        assert_eq!(
            p.value("system.memory.linux.available", &[]),
            9_000_000.0 * 1024.0
        );
        assert_eq!(
            p.value(
                "system.memory.utilization",
                &[("system.memory.state", "free")]
            ),
            0.25
        );
        assert_eq!(p.unit("system.memory.usage"), "By");
        assert_eq!(p.kind("system.memory.usage"), "updowncounter");
        assert_eq!(p.unit("system.memory.utilization"), "1");
    }

    #[test]
    fn paging_is_swap_space_operations_and_faults() {
        let p = Fixture::new()
            .file("proc/meminfo", MEMINFO)
            .file(
                "proc/vmstat",
                "nr_free_pages 1\npgpgin 900\npgpgout 800\npswpin 12\npswpout 34\n\
                 pgfault 1000\npgmajfault 10\n",
            )
            .collect(Collector::Paging);
        assert_eq!(
            p.value("system.paging.usage", &[("system.paging.state", "used")]),
            500_000.0 * 1024.0
        );
        assert_eq!(
            p.value(
                "system.paging.utilization",
                &[("system.paging.state", "free")]
            ),
            0.75
        );
        assert_eq!(
            p.value(
                "system.paging.operations",
                &[("system.paging.direction", "in")]
            ),
            12.0
        );
        assert_eq!(
            p.value(
                "system.paging.operations",
                &[("system.paging.direction", "out")]
            ),
            34.0
        );
        assert_eq!(
            p.value(
                "system.paging.faults",
                &[("system.paging.fault.type", "minor")]
            ),
            990.0
        );
        assert_eq!(p.kind("system.paging.faults"), "counter");
    }

    #[test]
    fn no_swap_means_no_utilization_rather_than_a_division_by_zero() {
        let p = Fixture::new()
            .file(
                "proc/meminfo",
                &MEMINFO.replace(
                    "2000000 kB\nSwapFree:        1500000",
                    "0 kB\nSwapFree:        0",
                ),
            )
            .file(
                "proc/vmstat",
                "pswpin 0\npswpout 0\npgfault 0\npgmajfault 0\n",
            )
            .collect(Collector::Paging);
        assert!(!p.has("system.paging.utilization"));
        assert_eq!(
            p.value("system.paging.usage", &[("system.paging.state", "free")]),
            0.0
        );
    }
}
