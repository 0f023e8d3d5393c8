//! The process's own figures in the names every Prometheus client library
//! uses (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …),
//! so stock dashboards and alerts work. Read from `/proc/self` at scrape
//! time: nothing runs between scrapes. prometheus-client has no process
//! collector, and the crates that add one pull in a `/proc` parser far
//! larger than the three files read here.
//!
//! A figure that cannot be read (not Linux, a `/proc` without the field)
//! is left out rather than reported as 0.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

#[derive(Debug)]
pub(super) struct ProcessCollector;

/// What `/proc/self/stat` and friends say, in Prometheus's units.
#[derive(Debug, Default, PartialEq)]
struct Figures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    start_time_seconds: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

/// The fields of `/proc/self/stat` after the command name (which may hold
/// spaces and parentheses, so the split is at the last `)`), numbered as in
/// proc(5) from field 3 on.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().collect())
}

/// Field `n` (proc(5)'s numbering) of a split `stat`.
fn field(fields: &[&str], n: usize) -> Option<f64> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

impl Figures {
    /// From the texts of `/proc/self/stat` and `/proc/stat` (for the boot
    /// time), with the clock tick rate and page size.
    fn from_stat(stat: &str, system_stat: &str, ticks_per_second: f64, page_size: f64) -> Figures {
        let f = stat_fields(stat);
        let boot_time = system_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|t| t.trim().parse::<f64>().ok());
        let cpu = field(&f, 14).zip(field(&f, 15)).map(|(u, s)| u + s);
        Figures {
            cpu_seconds: cpu.map(|t| t / ticks_per_second),
            virtual_bytes: field(&f, 23),
            resident_bytes: field(&f, 24).map(|pages| pages * page_size),
            start_time_seconds: boot_time
                .zip(field(&f, 22))
                .map(|(boot, ticks)| boot + ticks / ticks_per_second),
            ..Figures::default()
        }
    }

    fn read() -> Figures {
        let read = |p| std::fs::read_to_string(p).unwrap_or_default();
        // SAFETY: sysconf and getrlimit only read process settings.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let mut figures = if ticks > 0 && page > 0 {
            Figures::from_stat(
                &read("/proc/self/stat"),
                &read("/proc/stat"),
                ticks as f64,
                page as f64,
            )
        } else {
            Figures::default()
        };
        figures.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64);
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above; `limit` is a valid, writable rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            figures.max_fds = Some(limit.rlim_cur as f64);
        }
        figures
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let f = Figures::read();
        if let Some(cpu) = f.cpu_seconds {
            let m = enc.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(m)?;
        }
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size",
                Some(Unit::Bytes),
                f.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size",
                Some(Unit::Bytes),
                f.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                None,
                f.open_fds,
            ),
            (
                "process_max_fds",
                "Limit on open file descriptors (RLIMIT_NOFILE)",
                None,
                f.max_fds,
            ),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(Unit::Seconds),
                f.start_time_seconds,
            ),
        ];
        for (name, help, unit, value) in gauges {
            if let Some(v) = value {
                let m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
                ConstGauge::new(v).encode(m)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_a_command_name_with_spaces_and_parentheses() {
        // Fields 14/15 (utime, stime) = 250 + 50 ticks, 22 (starttime) =
        // 1000 ticks after boot, 23 (vsize) bytes, 24 (rss) pages.
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 8192000 300 18446744073709551615";
        let figures = Figures::from_stat(stat, "cpu 1 2 3\nbtime 1700000000\n", 100.0, 4096.0);
        assert_eq!(
            figures,
            Figures {
                cpu_seconds: Some(3.0),
                resident_bytes: Some(300.0 * 4096.0),
                virtual_bytes: Some(8_192_000.0),
                start_time_seconds: Some(1_700_000_010.0),
                ..Figures::default()
            }
        );
    }

    #[test]
    fn this_process_has_every_figure() {
        let f = Figures::read();
        assert!(f.cpu_seconds.is_some_and(|c| c >= 0.0), "{f:?}");
        assert!(f.resident_bytes.is_some_and(|r| r > 0.0), "{f:?}");
        assert!(f.open_fds.is_some_and(|n| n >= 3.0), "{f:?}");
        assert!(f.max_fds.is_some_and(|n| n >= 3.0), "{f:?}");
        assert!(f.start_time_seconds.is_some_and(|t| t > 1.6e9), "{f:?}");
    }
}
