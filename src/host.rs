//! The machine's name, as the components that describe the machine give it:
//! the `file` source's `host.name`, and the metric sources' `host.name`
//! and `service.instance.id` (which becomes Prometheus' `instance`).

use std::path::Path;

/// This machine's host name.
pub fn host_name() -> String {
    host_name_under(Path::new("/"))
}

/// The host name of the system whose `/proc` and `/etc` are under `root`
/// (`/host` in a container given the host's): the kernel's, else
/// `etc/hostname`, else `$HOSTNAME`, else `unknown`.
pub fn host_name_under(root: &Path) -> String {
    for p in [
        root.join("proc/sys/kernel/hostname"),
        root.join("etc/hostname"),
    ] {
        if let Ok(s) = std::fs::read_to_string(p) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_name_comes_first_then_etc_hostname() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc/sys/kernel")).unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/hostname"), "from-etc\n").unwrap();
        assert_eq!(host_name_under(d.path()), "from-etc");
        std::fs::write(d.path().join("proc/sys/kernel/hostname"), "gw-01\n").unwrap();
        assert_eq!(host_name_under(d.path()), "gw-01");
    }
}
