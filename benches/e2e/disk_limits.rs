//! The disk's own fdatasync and sequential-write limits, measured in the
//! directory the phases write to so their figures can be judged beside them.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::table::Table;

/// The disk's own limits in the directory the phases write to, beside
/// their figures: a durable round trip bounds how often a cursor or a
/// checkpoint can be made durable.
pub(crate) fn disk_limits(table: &mut Table, dir: &Path) {
    table.head("disk limits (same file system, this run, 1 s each)");
    let _ = Command::new("sync").status();
    let path = dir.join("probe-4k");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let buf = vec![0xa5u8; 4096];
    let (started, mut n) = (Instant::now(), 0u32);
    while started.elapsed() < Duration::from_secs(1) {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let t = started.elapsed().as_secs_f64();
    table.row(
        "4 KiB append + fdatasync",
        format!("{:.0} /s ({:.2} ms each)", n as f64 / t, t * 1e3 / n as f64),
        "reference".into(),
        None,
    );
    drop(f);
    let _ = std::fs::remove_file(&path);
    let _ = Command::new("sync").status();
    let path = dir.join("probe-seq");
    let mut f = std::fs::File::create(&path).unwrap();
    let buf: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
    let (started, mut bytes) = (Instant::now(), 0u64);
    while started.elapsed() < Duration::from_secs(1) {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        bytes += buf.len() as u64;
    }
    table.row(
        "sequential write, fdatasync every 1 MiB",
        format!(
            "{:.1} MB/s",
            bytes as f64 / started.elapsed().as_secs_f64() / 1e6
        ),
        "reference".into(),
        None,
    );
    drop(f);
    let _ = std::fs::remove_file(&path);
}
