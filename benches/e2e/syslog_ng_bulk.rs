//! Phase 4b: syslog-ng tailing the same files into the same `_bulk`
//! receiver as holdfast's file phase: the throughput, the agent's CPU and
//! the receiver's CPU per document, beside holdfast's on the same input.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::contender::Contender;
use crate::input::Corpus;
use crate::measure::{proc_sample, ProcSample};
use crate::receiver::Receiver;
use crate::syslog_ng_under_test::{Buffer, SyslogNgUnderTest};
use crate::table::{thousands, Table};
use crate::PHASE_DEADLINE;

/// holdfast's figures from the file phase, for the ratios.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileFigures {
    pub(crate) lines_per_s: f64,
    pub(crate) receiver_cpu_per_doc_us: f64,
    pub(crate) body_bytes_per_doc: f64,
}

/// syslog-ng twice: keeping lines in memory (its default), then with a
/// reliable disk buffer (its durable setting, the like of holdfast's log).
pub(crate) fn syslog_ng_bulk_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    holdfast: Option<FileFigures>,
) {
    for buffer in [Buffer::Memory, Buffer::ReliableDisk] {
        one_run(table, root, input, c, receiver, holdfast, buffer);
    }
}

fn one_run(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    holdfast: Option<FileFigures>,
    buffer: Buffer,
) {
    let what = match buffer {
        Buffer::Memory => "in memory",
        Buffer::ReliableDisk => "reliable disk buffer",
    };
    table.head(&format!(
        "syslog-ng ({what}) for comparison: the same files -> the same _bulk receiver"
    ));
    let dir = root.join("syslog-ng-bulk");
    let mut ng = match SyslogNgUnderTest::new(dir.clone(), input, receiver.addr, buffer) {
        Ok(ng) => ng,
        Err(why) => {
            table.note(format!("  {why}: skipped"));
            return;
        }
    };
    eprintln!("phase syslog-ng ({what}) -> _bulk ...");
    table.note(format!("  {}", buffer.settings()));
    receiver.reset(true);
    let recv_cpu0 = receiver.cpu_s();
    let started = ng.start();
    let task = format!(
        "/proc/{}",
        ng.child.as_ref().map(|c| c.id()).unwrap_or_default()
    );
    let mut sample = ProcSample::default();
    let end = started + PHASE_DEADLINE;
    while receiver.stats.es_docs.load(Ordering::Relaxed) < c.lines {
        ng.check_alive();
        assert!(
            Instant::now() < end,
            "syslog-ng did not deliver every line within {PHASE_DEADLINE:?}"
        );
        sample = proc_sample(&task);
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    sample = ProcSample {
        cpu_s: proc_sample(&task).cpu_s.max(sample.cpu_s),
        ..sample
    };
    let recv_cpu = receiver.cpu_s() - recv_cpu0;
    let docs = receiver.stats.es_docs.load(Ordering::Relaxed);
    let body = receiver.stats.body_bytes.load(Ordering::Relaxed);
    ng.kill9();
    let lps = c.lines as f64 / secs;
    table.row(
        "lines/s (spawn to the last document accepted)",
        format!("{}  ({secs:.2} s)", thousands(lps)),
        String::new(),
        None,
    );
    table.row(
        "CPU s per million lines (syslog-ng, user+sys)",
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
    let ng_recv_us = recv_cpu * 1e6 / docs.max(1) as f64;
    table.row(
        "the receiver's CPU per document",
        format!(
            "{ng_recv_us:.2} µs  ({recv_cpu:.2} s for {} documents, {:.0} bytes of _bulk body each)",
            thousands(docs as f64),
            body as f64 / docs.max(1) as f64
        ),
        String::new(),
        None,
    );
    if let Some(h) = holdfast {
        let ratio = h.lines_per_s / lps;
        table.row(
            "holdfast lines/s ÷ syslog-ng's, same input, same receiver",
            format!("{ratio:.1}×"),
            ">= 6×".into(),
            Some(ratio >= 6.0),
        );
        let recv_ratio = h.receiver_cpu_per_doc_us / ng_recv_us.max(1e-9);
        table.row(
            "the receiver's CPU per holdfast document ÷ per syslog-ng's",
            format!(
                "{recv_ratio:.2}×  ({:.2} µs vs {ng_recv_us:.2} µs; {:.0} vs {:.0} body bytes a document)",
                h.receiver_cpu_per_doc_us,
                h.body_bytes_per_doc,
                body as f64 / docs.max(1) as f64
            ),
            "<= 2×".into(),
            Some(recv_ratio <= 2.0),
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
