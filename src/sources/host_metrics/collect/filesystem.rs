//! `filesystem`: space per mounted file system, from the mount table and
//! `statvfs(2)` of each mount point the filters take.
//!
//! The mount table is `/proc/self/mounts` when `root` is `/` (holdfast's
//! own view), else `<root>/proc/1/mounts` (the view of the host's init,
//! for a container that mounts the host's root at `root`); each mount
//! point is statted under `root` too.

use std::path::PathBuf;

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

/// One mounted file system the filters took.
struct Mount {
    device: String,
    mount_point: String,
    fs_type: String,
    mode: &'static str,
}

pub(super) fn filesystem(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let rel = if host.root == std::path::Path::new("/") {
        "proc/self/mounts"
    } else {
        "proc/1/mounts"
    };
    let path = host.path(rel);
    host.read_path(&path)?;
    let (text, filters) = (&host.buf, &host.filters);
    let mut mounts: Vec<Mount> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(device), Some(mount_point), Some(fs_type), Some(options)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let mount_point = unescape(mount_point);
        if !filters.fs_types.takes(fs_type) || !filters.mount_points.takes(&mount_point) {
            continue;
        }
        let mode = if options.split(',').any(|o| o == "ro") {
            "ro"
        } else {
            "rw"
        };
        // A mount over another at the same point hides it: the last is
        // what statvfs sees, and one series per mount point is kept.
        mounts.retain(|m| m.mount_point != mount_point);
        mounts.push(Mount {
            device: unescape(device),
            mount_point,
            fs_type: fs_type.to_string(),
            mode,
        });
    }
    for m in &mounts {
        let at: PathBuf = host.root.join(m.mount_point.trim_start_matches('/'));
        // A mount this user may not stat (another user's FUSE mount) or a
        // stale network mount says nothing; the others are still reported.
        let s = match rustix::fs::statvfs(&at) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(mount_point = %m.mount_point, error = %e,
                    "host_metrics: statvfs failed; this file system is left out");
                continue;
            }
        };
        let unit = s.f_frsize.max(1);
        let total = s.f_blocks.saturating_mul(unit);
        let free = s.f_bavail.saturating_mul(unit);
        let reserved = s.f_bfree.saturating_sub(s.f_bavail).saturating_mul(unit);
        let used = s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(unit);
        if total == 0 {
            continue;
        }
        let attrs = |state| {
            [
                ("system.device", Attr::Str(&m.device)),
                ("system.filesystem.mountpoint", Attr::Str(&m.mount_point)),
                ("system.filesystem.type", Attr::Str(&m.fs_type)),
                ("system.filesystem.mode", Attr::Str(m.mode)),
                ("system.filesystem.state", Attr::Str(state)),
            ]
        };
        out.metric("system.filesystem.usage", "By", Kind::UpDownCounter)
            .uint(&attrs("used"), used)
            .uint(&attrs("free"), free)
            .uint(&attrs("reserved"), reserved);
        out.metric("system.filesystem.limit", "By", Kind::UpDownCounter)
            .uint(&attrs("used")[..4], total);
        // As df(1) counts it: what is used of what non-root users can have.
        let usable = used.saturating_add(free);
        if usable > 0 {
            out.metric("system.filesystem.utilization", "1", Kind::Gauge)
                .double(&attrs("used")[..4], used as f64 / usable as f64);
        }
    }
    Ok(())
}

/// The mount table writes space, tab, newline and backslash as `\040`,
/// `\011`, `\012`, `\134`.
fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(o)) => {
                out.push((o[0] - b'0') * 64 + (o[1] - b'0') * 8 + (o[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::{Collector, Filters};
    use super::unescape;
    use crate::sources::host_metrics::filter::Filter;

    fn strings(s: &[&str]) -> Option<Vec<String>> {
        Some(s.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_mount_reports_used_free_and_reserved_as_statvfs_says() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.root().join("data dir")).unwrap();
        let f = f.file(
            "proc/1/mounts",
            "/dev/sda1 / ext4 rw,relatime 0 0\n\
             proc /proc proc rw,nosuid 0 0\n\
             /dev/sdb1 /data\\040dir xfs ro,relatime 0 0\n",
        );
        let f = f.filters(Filters {
            fs_types: Filter::new(None, strings(&["proc"])).unwrap(),
            ..Filters::default()
        });
        let p = f.collect(Collector::Filesystem);
        let s = rustix::fs::statvfs(f.root()).unwrap();
        let attrs = |mp, dev, ty, mode, state| {
            vec![
                ("system.device", dev),
                ("system.filesystem.mountpoint", mp),
                ("system.filesystem.type", ty),
                ("system.filesystem.mode", mode),
                ("system.filesystem.state", state),
            ]
        };
        let v = |state| {
            p.value(
                "system.filesystem.usage",
                &attrs("/data dir", "/dev/sdb1", "xfs", "ro", state),
            )
        };
        let total = (s.f_blocks * s.f_frsize) as f64;
        assert_eq!(v("used") + v("free") + v("reserved"), total);
        assert_eq!(
            p.value(
                "system.filesystem.limit",
                &attrs("/", "/dev/sda1", "ext4", "rw", "x")[..4]
            ),
            total
        );
        // proc is filtered out before it is statted.
        assert_eq!(p.points("system.filesystem.usage").len(), 6);
        assert_eq!(p.points("system.filesystem.utilization").len(), 2);
        assert_eq!(p.unit("system.filesystem.usage"), "By");
        assert_eq!(p.kind("system.filesystem.usage"), "updowncounter");
    }

    #[test]
    fn include_filters_take_only_what_they_name() {
        let f = Fixture::new().file(
            "proc/1/mounts",
            "/dev/sda1 / ext4 rw 0 0\n/dev/sda2 /boot ext4 rw 0 0\n",
        );
        std::fs::create_dir_all(f.root().join("boot")).unwrap();
        let f = f.filters(Filters {
            mount_points: Filter::new(strings(&["/boot"]), None).unwrap(),
            ..Filters::default()
        });
        let p = f.collect(Collector::Filesystem);
        assert!(p
            .attrs("system.filesystem.usage")
            .iter()
            .all(|a| a.contains(&"system.filesystem.mountpoint=/boot".to_string())));
    }

    #[test]
    fn mount_table_escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b\\134c"), "/mnt/a b\\c");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/odd\\04"), "/odd\\04");
    }
}
