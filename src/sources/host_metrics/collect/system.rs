//! `system` (uptime, `/proc/uptime`) and `processes` (a state per process
//! in `/proc/<pid>/stat`; forks since boot from `/proc/stat`).

use procfs::FromRead;

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

pub(super) fn uptime(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let (path, text) = host.read("proc/uptime")?;
    let u = procfs::Uptime::from_read(text.as_bytes()).map_err(|e| Failure::parse(&path, e))?;
    out.metric("system.uptime", "s", Kind::Gauge)
        .double(&[], u.uptime);
    Ok(())
}

/// `process.state` of a `/proc/<pid>/stat` state letter: the semantic
/// conventions' values where one fits; `D` (uninterruptible, mostly disk
/// I/O) is `blocked`, as the kernel's `procs_blocked` counts it.
fn state(letter: u8) -> Option<&'static str> {
    Some(match letter {
        b'R' => "running",
        b'S' | b'I' => "sleeping",
        b'D' => "blocked",
        b'T' | b't' => "stopped",
        b'Z' => "defunct",
        _ => return None,
    })
}

const STATES: [&str; 5] = ["running", "sleeping", "blocked", "stopped", "defunct"];

pub(super) fn processes(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let (path, text) = host.read("proc/stat")?;
    let created: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("processes "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Failure::parse(&path, "no processes line"))?;

    let proc_dir = host.path("proc");
    let entries = std::fs::read_dir(&proc_dir).map_err(|e| Failure::io(&proc_dir, &e))?;
    let mut counts = [0i64; STATES.len()];
    let mut stat = proc_dir.clone();
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        stat.push(&name);
        stat.push("stat");
        // A process that exits between the listing and the read is gone,
        // not an error.
        let read = host.read_path(&stat);
        stat.pop();
        stat.pop();
        if read.is_err() {
            continue;
        }
        // "pid (comm) S ...": comm may hold spaces and parentheses, the
        // state follows the last ')'.
        let letter = host
            .buf
            .rfind(')')
            .and_then(|at| host.buf.as_bytes().get(at + 2).copied());
        if let Some(s) = letter.and_then(state) {
            if let Some(i) = STATES.iter().position(|x| *x == s) {
                counts[i] += 1;
            }
        }
    }
    let mut count = out.metric("system.process.count", "{process}", Kind::UpDownCounter);
    for (s, n) in STATES.iter().zip(counts) {
        count.int(&[("process.state", Attr::Str(s))], n);
    }
    out.metric("system.process.created", "{process}", Kind::Counter)
        .uint(&[], created);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::Collector;

    #[test]
    fn uptime_is_a_gauge_in_seconds() {
        let p = Fixture::new()
            .file("proc/uptime", "12345.67 45678.90\n")
            .collect(Collector::System);
        assert_eq!(p.value("system.uptime", &[]), 12345.67);
        assert_eq!(p.unit("system.uptime"), "s");
        assert_eq!(p.kind("system.uptime"), "gauge");
    }

    #[test]
    fn processes_are_counted_by_state() {
        let p = Fixture::new()
            .file("proc/stat", "cpu 1 1 1 1\nbtime 1\nprocesses 4242\n")
            .file("proc/1/stat", "1 (systemd) S 0 1 1\n")
            .file("proc/2/stat", "2 (kthreadd) S 0 0 0\n")
            .file("proc/30/stat", "30 (a (weird) name) R 1 30\n")
            .file("proc/31/stat", "31 (dd) D 1 31\n")
            .file("proc/32/stat", "32 (zombie) Z 1 32\n")
            .file("proc/33/stat", "33 (idle) I 2 0\n")
            .file("proc/self/stat", "99 (not a pid dir) R\n")
            .collect(Collector::Processes);
        let n = |s| p.value("system.process.count", &[("process.state", s)]);
        assert_eq!(n("sleeping"), 3.0);
        assert_eq!(n("running"), 1.0);
        assert_eq!(n("blocked"), 1.0);
        assert_eq!(n("defunct"), 1.0);
        assert_eq!(n("stopped"), 0.0);
        assert_eq!(p.value("system.process.created", &[]), 4242.0);
        assert_eq!(p.kind("system.process.created"), "counter");
        assert_eq!(p.unit("system.process.count"), "{process}");
    }
}
