//! `disk`: I/O per block device (`/proc/diskstats`), partitions included
//! as the kernel lists them.

use procfs::FromRead;

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

/// `/proc/diskstats` counts sectors of 512 bytes whatever the device's
/// own sector size.
const SECTOR: u64 = 512;

pub(super) fn disk(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let (path, text) = host.read("proc/diskstats")?;
    let disks =
        procfs::DiskStats::from_read(text.as_bytes()).map_err(|e| Failure::parse(&path, e))?;
    let dev = "system.device";
    let dir = "disk.io.direction";
    let ms = |v: u64| v as f64 / 1e3;
    for d in &disks.0 {
        let (read, write) = (
            [(dev, Attr::Str(&d.name)), (dir, Attr::Str("read"))],
            [(dev, Attr::Str(&d.name)), (dir, Attr::Str("write"))],
        );
        out.metric("system.disk.io", "By", Kind::Counter)
            .uint(&read, d.sectors_read.saturating_mul(SECTOR))
            .uint(&write, d.sectors_written.saturating_mul(SECTOR));
        out.metric("system.disk.operations", "{operation}", Kind::Counter)
            .uint(&read, d.reads)
            .uint(&write, d.writes);
        out.metric("system.disk.merged", "{operation}", Kind::Counter)
            .uint(&read, d.merged)
            .uint(&write, d.writes_merged);
        out.metric("system.disk.operation_time", "s", Kind::Counter)
            .double(&read, ms(d.time_reading))
            .double(&write, ms(d.time_writing));
        out.metric("system.disk.io_time", "s", Kind::Counter)
            .double(&[(dev, Attr::Str(&d.name))], ms(d.time_in_progress));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::Collector;

    #[test]
    fn disk_io_is_bytes_operations_and_seconds_per_device() {
        let p = Fixture::new()
            .file(
                "proc/diskstats",
                "   8       0 sda 1000 20 8000 500 2000 30 16000 700 0 900 1200 0 0 0 0 0 0\n\
                 259       1 nvme0n1p1 10 0 80 5 0 0 0 0 0 6 5\n",
            )
            .collect(Collector::Disk);
        let (dev, dir) = ("system.device", "disk.io.direction");
        assert_eq!(
            p.value("system.disk.io", &[(dev, "sda"), (dir, "read")]),
            8000.0 * 512.0
        );
        assert_eq!(
            p.value("system.disk.io", &[(dev, "sda"), (dir, "write")]),
            16000.0 * 512.0
        );
        assert_eq!(
            p.value("system.disk.operations", &[(dev, "sda"), (dir, "write")]),
            2000.0
        );
        assert_eq!(
            p.value("system.disk.merged", &[(dev, "sda"), (dir, "read")]),
            20.0
        );
        assert_eq!(
            p.value(
                "system.disk.operation_time",
                &[(dev, "sda"), (dir, "write")]
            ),
            0.7
        );
        assert_eq!(p.value("system.disk.io_time", &[(dev, "sda")]), 0.9);
        assert_eq!(
            p.value("system.disk.io", &[(dev, "nvme0n1p1"), (dir, "read")]),
            80.0 * 512.0
        );
        assert_eq!(p.unit("system.disk.io"), "By");
        assert_eq!(p.unit("system.disk.io_time"), "s");
        assert_eq!(p.kind("system.disk.operations"), "counter");
    }
}
