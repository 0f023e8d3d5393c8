//! `pressure`: pressure stall information (`/proc/pressure/{cpu,memory,io}`,
//! Linux 4.20+ with `CONFIG_PSI`). The cumulative stall time only: the
//! kernel's 10 s/60 s/300 s averages can be computed from it over any
//! window (`rate()`), and are not worth three more series each.
//!
//! A kernel without PSI has no `/proc/pressure`: no series, no error.

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

/// The resource files and their metric names. The semantic conventions
/// have no PSI metric released yet; these are the names of the current
/// proposal (semantic-conventions PR 3528), which
/// `docs/sources-host-metrics.md` says may still change.
const RESOURCES: [(&str, &str); 3] = [
    ("proc/pressure/cpu", "system.cpu.linux.pressure.total"),
    ("proc/pressure/memory", "system.memory.linux.pressure.total"),
    ("proc/pressure/io", "system.io.linux.pressure.total"),
];

pub(super) fn pressure(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    for (rel, name) in RESOURCES {
        let (path, text) = host.read(rel)?;
        let mut series = out.metric(name, "s", Kind::Counter);
        for line in text.lines() {
            let mut words = line.split_ascii_whitespace();
            let Some(kind @ ("some" | "full")) = words.next() else {
                continue;
            };
            let micros: u64 = words
                .find_map(|w| w.strip_prefix("total="))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Failure::parse(&path, format!("{kind}: no total=")))?;
            series.double(
                &[("system.linux.pressure.stall_type", Attr::Str(kind))],
                micros as f64 / 1e6,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::{Collector, Failure};

    #[test]
    fn stall_time_is_seconds_by_stall_type() {
        let p = Fixture::new()
            .file(
                "proc/pressure/cpu",
                "some avg10=0.00 avg60=0.10 avg300=0.20 total=1500000\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            )
            .file(
                "proc/pressure/memory",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=250\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=125\n",
            )
            .file(
                "proc/pressure/io",
                "some avg10=1.00 avg60=0.00 avg300=0.00 total=3000000\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n",
            )
            .collect(Collector::Pressure);
        let stall = "system.linux.pressure.stall_type";
        assert_eq!(
            p.value("system.cpu.linux.pressure.total", &[(stall, "some")]),
            1.5
        );
        assert_eq!(
            p.value("system.memory.linux.pressure.total", &[(stall, "full")]),
            0.000125
        );
        assert_eq!(
            p.value("system.io.linux.pressure.total", &[(stall, "full")]),
            2.0
        );
        assert_eq!(p.unit("system.io.linux.pressure.total"), "s");
        assert_eq!(p.kind("system.io.linux.pressure.total"), "counter");
    }

    #[test]
    fn a_kernel_without_psi_is_absent_not_broken() {
        let e = Fixture::new().collect_err(Collector::Pressure);
        assert!(matches!(e, Failure::Absent(_)), "{e}");
    }
}
