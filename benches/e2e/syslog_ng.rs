//! Phase 4: syslog-ng tailing the same files into a file, for comparison.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::input::Corpus;
use crate::measure::{proc_sample, ProcSample};
use crate::table::{thousands, Table};
use crate::PHASE_DEADLINE;

/// syslog-ng tailing the same files into one file, without fsync and
/// without parsing: the speed the target is set against.
pub(crate) fn syslog_ng_phase(table: &mut Table, root: &Path, input: &Path, c: &Corpus) {
    table.head("syslog-ng for comparison: the same files -> a file, no fsync, no parsing");
    let Some(bin) = syslog_ng_bin() else {
        table.note("  syslog-ng is not installed (apt-get install syslog-ng-core): skipped".into());
        return;
    };
    eprintln!("phase syslog-ng ...");
    let dir = root.join("syslog-ng");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.log");
    let conf = dir.join("syslog-ng.conf");
    std::fs::write(
        &conf,
        format!(
            "@version: 3.38\n\
             options {{ threaded(yes); stats-freq(0); log-msg-size(262144); }};\n\
             source s_files {{ wildcard-file(base-dir(\"{}\") filename-pattern(\"*.log\") recursive(no) \
             flags(no-parse) follow-freq(1) log-fetch-limit(10000) log-iw-size(100000) max-files(100)); }};\n\
             destination d_out {{ file(\"{}\" template(\"${{MSG}}\\n\") flush-lines(10000) fsync(no)); }};\n\
             log {{ source(s_files); destination(d_out); flags(flow-control); }};\n",
            input.display(),
            out.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut child = Command::new(&bin)
        .arg("-F")
        .arg("--no-caps")
        .arg("-f")
        .arg(&conf)
        .arg("-R")
        .arg(dir.join("persist"))
        .arg("-p")
        .arg(dir.join("pid"))
        .arg("-c")
        .arg(dir.join("ctl"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .expect("starting syslog-ng");
    let task = format!("/proc/{}", child.id());
    let mut lines = 0u64;
    let mut file = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut sample = ProcSample::default();
    let end = started + PHASE_DEADLINE;
    while lines < c.lines {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "syslog-ng exited ({status}): {}",
                std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < end, "syslog-ng did not write every line");
        if file.is_none() {
            file = std::fs::File::open(&out).ok();
        }
        let mut progressed = false;
        if let Some(f) = file.as_mut() {
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                progressed = true;
                lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            }
        }
        sample = proc_sample(&task);
        if !progressed {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let lps = c.lines as f64 / secs;
    table.row(
        "lines/s (spawn to the last line in the output)",
        format!("{}  ({secs:.2} s)", thousands(lps)),
        String::new(),
        None,
    );
    table.row(
        "MB/s of input",
        format!("{:.1}", c.bytes as f64 / secs / 1e6),
        String::new(),
        None,
    );
    table.row(
        "CPU s per million lines (user+sys)",
        format!(
            "{:.2}  ({:.1} s in all, {:.0}% of one core)",
            sample.cpu_s / (c.lines as f64 / 1e6),
            sample.cpu_s,
            sample.cpu_s / secs * 100.0
        ),
        String::new(),
        None,
    );
    table.row(
        "peak RSS (VmHWM)",
        format!("{:.1} MiB", sample.hwm_kib as f64 / 1024.0),
        String::new(),
        None,
    );
    table.row(
        "bytes written to disk per byte ingested",
        format!("{:.2}", sample.write_bytes as f64 / c.bytes as f64),
        String::new(),
        None,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

pub(crate) fn syslog_ng_bin() -> Option<PathBuf> {
    [
        "/usr/sbin/syslog-ng",
        "/usr/bin/syslog-ng",
        "/sbin/syslog-ng",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}
