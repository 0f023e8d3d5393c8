//! Damaged state files under the running agent (design promises 3 and 10):
//! a log is written once, and each table row damages a copy of it (a bit
//! flip or a zeroed length in a sealed segment, a garbage or cut tail on the
//! active one, a broken header, a missing segment, stray files), then the
//! real binary starts on the copy with a new `file` sink. It must start,
//! stay up, log and count the damage, and deliver exactly the intact
//! records. Then: both cursor slots garbled, a file source checkpoint
//! garbled, and a second `holdfast run` on a data directory in use.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon::{free_port, holdfast, http_get, wait_for, Agent};
use prost::Message;

/// Records in the prepared log: ~3 KiB each in 64 KiB segments, so the log
/// has several sealed segments and an active one.
const RECORDS: usize = 60;
// Uncompressed: the test finds and damages frames by their layout, and needs
// the records to fill several segments.
const LOG: &str =
    "[log]\nsegment_size = \"64KiB\"\nmax_bytes = \"16MiB\"\ncompression = \"none\"\n";

fn record_body(i: usize) -> String {
    format!("record {i:04} {}", "p".repeat(3000))
}

fn logs_request(body: &str) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    body: Some(AnyValue {
                        value: Some(Value::StringValue(body.to_string())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn post(addr: &str, body: &[u8]) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/logs HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// An agent with an OTLP source and, if `sink`, a `file` sink reading it.
fn otlp_agent(sink: bool) -> (Agent, String) {
    let a = Agent::new("");
    let otlp = format!("127.0.0.1:{}", free_port());
    let mut body = format!("{LOG}\n[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n");
    if sink {
        body += &format!(
            "\n[sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
            a.path("out").display()
        );
    }
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    (a, otlp)
}

/// Record number → times it is in the sink's output; a line that is not a
/// whole event fails the test.
fn delivered(out: &Path) -> BTreeMap<usize, usize> {
    let mut seen = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return seen;
    };
    for e in entries {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("a sink line that is not JSON ({e}): {l:.200}"));
            let body = v["record"]["body"]["stringValue"]
                .as_str()
                .unwrap_or_else(|| panic!("a sink line without a body: {l:.200}"));
            let n: usize = body[7..11].parse().unwrap();
            assert_eq!(body, record_body(n), "record {n} arrived changed");
            *seen.entry(n).or_insert(0) += 1;
        }
    }
    seen
}

fn lag(a: &Agent) -> Option<f64> {
    a.metric("holdfast_consumer_lag_events{sink=\"archive\"}")
}

/// Waits until the sink has finished everything in the log.
fn wait_caught_up(a: &Agent) {
    wait_for(
        "the archive sink to catch up",
        Duration::from_secs(60),
        || (lag(a)? == 0.0).then_some(()),
    );
}

fn segments(log: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

/// (offset, length, first sequence) of each frame of a segment file.
fn frames(seg: &Path) -> Vec<(usize, usize, u64)> {
    let b = std::fs::read(seg).unwrap();
    let mut out = Vec::new();
    let mut at = 32;
    while at + 28 <= b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let seq = u64::from_le_bytes(b[at + 8..at + 16].try_into().unwrap());
        out.push((at, 8 + len, seq));
        at += 8 + len;
    }
    out
}

fn rewrite(p: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = std::fs::read(p).unwrap();
    f(&mut b);
    std::fs::write(p, b).unwrap();
}

/// Writes the prepared log once: RECORDS records, one frame each.
fn prepared_log() -> tempfile::TempDir {
    let (mut a, otlp) = otlp_agent(false);
    a.start();
    a.wait_ready();
    for i in 0..RECORDS {
        assert_eq!(post(&otlp, &logs_request(&record_body(i))), 200);
    }
    assert!(a.stop().success(), "{}", a.stderr());
    let keep = tempfile::tempdir().unwrap();
    copy_dir(&a.data_dir().join("log"), keep.path());
    let segs = segments(keep.path());
    assert!(segs.len() >= 3, "several segments: {segs:?}");
    keep
}

/// `holdfast run --config CONFIG`, which must exit on its own within 20 s:
/// (exit code, stderr).
fn run_to_exit(config: &str) -> (Option<i32>, String) {
    let args = ["run", "--config", config];
    let mut child = std::process::Command::new(daemon::BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > end {
            // Never leave a stray agent behind a failed test.
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "holdfast {args:?} did not exit within {:?}",
                Duration::from_secs(20)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// One kind of damage: what it does to the log directory, and what the
/// agent must then report and deliver.
struct Damage {
    name: &'static str,
    /// Damages the log directory; returns the records that cannot survive.
    apply: fn(&Path) -> Vec<usize>,
    /// Words of the warning the agent logs (all on one line).
    logged: &'static [&'static str],
    /// (metric sample, value) after delivery.
    metrics: &'static [(&'static str, f64)],
}

/// The frame holding record `n` in the sealed segment `seg_index`.
fn frame_in(log: &Path, seg_index: usize, nth: usize) -> (PathBuf, usize, usize, usize) {
    let seg = segments(log)[seg_index].clone();
    let (at, len, seq) = frames(&seg)[nth];
    (seg, at, len, seq as usize)
}

fn damages() -> Vec<Damage> {
    vec![
        Damage {
            name: "a bit flipped in a sealed segment's record",
            apply: |log| {
                let (seg, at, len, seq) = frame_in(log, 0, 3);
                rewrite(&seg, |b| b[at + 28 + (len - 28) / 2] ^= 0x10);
                vec![seq]
            },
            logged: &[
                "skipping damaged data in the log",
                "00000000000000000000.seg",
            ],
            metrics: &[
                ("holdfast_log_corrupt_frames_total", 1.0),
                (
                    "holdfast_log_evicted_events_total{sink=\"archive\",reason=\"corrupt\"}",
                    1.0,
                ),
            ],
        },
        Damage {
            name: "a frame length zeroed in a sealed segment",
            apply: |log| {
                let (seg, at, _, seq) = frame_in(log, 1, 2);
                rewrite(&seg, |b| b[at..at + 4].fill(0));
                vec![seq]
            },
            logged: &["skipping damaged data in the log"],
            metrics: &[
                ("holdfast_log_corrupt_frames_total", 1.0),
                (
                    "holdfast_log_evicted_events_total{sink=\"archive\",reason=\"corrupt\"}",
                    1.0,
                ),
            ],
        },
        Damage {
            name: "a frame's checksum flipped in a sealed segment",
            apply: |log| {
                let (seg, at, _, seq) = frame_in(log, 0, 0);
                rewrite(&seg, |b| b[at + 4] ^= 0x01);
                vec![seq]
            },
            logged: &["skipping damaged data in the log"],
            metrics: &[("holdfast_log_corrupt_frames_total", 1.0)],
        },
        Damage {
            name: "garbage after the active segment's last frame",
            apply: |log| {
                let seg = segments(log).pop().unwrap();
                let mut f = std::fs::OpenOptions::new().append(true).open(seg).unwrap();
                let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 37 + 11) as u8).collect();
                f.write_all(&garbage).unwrap();
                vec![]
            },
            logged: &["truncating torn tail of segment", "offset"],
            metrics: &[
                ("holdfast_log_torn_tails_total", 1.0),
                ("holdfast_log_corrupt_frames_total", 0.0),
            ],
        },
        Damage {
            name: "the active segment cut inside its last frame",
            apply: |log| {
                let seg = segments(log).pop().unwrap();
                let (at, len, seq) = *frames(&seg).last().unwrap();
                let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
                f.set_len((at + len / 2) as u64).unwrap();
                vec![seq as usize]
            },
            logged: &["truncating torn tail of segment"],
            metrics: &[("holdfast_log_torn_tails_total", 1.0)],
        },
        Damage {
            name: "a sealed segment's header damaged",
            apply: |log| {
                let seg = segments(log)[1].clone();
                rewrite(&seg, |b| b[0..4].copy_from_slice(b"XXXX"));
                vec![]
            },
            logged: &["00000000000000000", "header"],
            metrics: &[
                ("holdfast_log_corrupt_frames_total", 0.0),
                ("holdfast_log_corrupt_segment_headers_total", 1.0),
            ],
        },
        Damage {
            name: "a sealed segment missing",
            apply: |log| {
                let seg = segments(log)[1].clone();
                let lost = frames(&seg).iter().map(|f| f.2 as usize).collect();
                std::fs::remove_file(seg).unwrap();
                lost
            },
            logged: &["cannot be delivered"],
            metrics: &[],
        },
        Damage {
            name: "a sealed segment overwritten with garbage",
            apply: |log| {
                let seg = segments(log)[1].clone();
                let lost = frames(&seg).iter().map(|f| f.2 as usize).collect();
                rewrite(&seg, |b| {
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
                    }
                });
                lost
            },
            logged: &["skipping damaged data in the log", "00000000000000000"],
            metrics: &[("holdfast_log_corrupt_frames_total", 1.0)],
        },
        Damage {
            name: "a sealed segment emptied",
            apply: |log| {
                let seg = segments(log)[1].clone();
                let lost = frames(&seg).iter().map(|f| f.2 as usize).collect();
                std::fs::File::create(seg).unwrap();
                lost
            },
            logged: &["00000000000000000"],
            metrics: &[],
        },
        Damage {
            name: "stray files in the log directory",
            apply: |log| {
                std::fs::write(log.join("notes.txt"), b"left by an operator").unwrap();
                std::fs::write(log.join("00000000000000000099.seg.tmp"), b"\0\0\0").unwrap();
                vec![]
            },
            logged: &["unexpected file in the log directory", "notes.txt"],
            metrics: &[("holdfast_log_corrupt_frames_total", 0.0)],
        },
    ]
}

#[test]
fn damaged_segments_are_counted_and_skipped_and_the_intact_records_delivered() {
    let prepared = prepared_log();
    let mut failures = Vec::new();
    for d in damages() {
        let (mut a, otlp) = otlp_agent(true);
        let log = a.data_dir().join("log");
        copy_dir(prepared.path(), &log);
        let lost = (d.apply)(&log);

        // The operator's tool reads the damaged log without changing it.
        let out = holdfast(&["inspect", "--config", a.config_arg(), "--json"]);
        if !out.status.success() {
            failures.push(format!(
                "{}: inspect failed: {}",
                d.name,
                String::from_utf8_lossy(&out.stderr)
            ));
        }

        a.start();
        a.wait_ready();
        wait_caught_up(&a);
        let got = delivered(&a.path("out"));
        let want: BTreeMap<usize, usize> = (0..RECORDS)
            .filter(|i| !lost.contains(i))
            .map(|i| (i, 1))
            .collect();
        if got != want {
            let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(k)).collect();
            let extra: Vec<_> = got.iter().filter(|(k, n)| want.get(k) != Some(n)).collect();
            failures.push(format!(
                "{}: delivered differs: missing {missing:?}, unexpected or repeated {extra:?}",
                d.name
            ));
        }
        let stderr = a.stderr();
        if !stderr
            .lines()
            .any(|l| d.logged.iter().all(|w| l.contains(w)))
        {
            failures.push(format!(
                "{}: no log line with {:?}:\n{stderr}",
                d.name, d.logged
            ));
        }
        for (sample, n) in d.metrics {
            let v = a.metric(sample);
            if v != Some(*n) {
                failures.push(format!("{}: {sample} = {v:?}, want {n}", d.name));
            }
        }
        // Up, ready, and taking new data after the damage.
        if http_get(a.api, "/readyz").map(|r| r.0) != Some(200) {
            failures.push(format!("{}: /readyz is not 200", d.name));
        }
        let status = post(&otlp, &logs_request(&record_body(9999)));
        if status != 200 {
            failures.push(format!("{}: a new request got {status}", d.name));
        }
        wait_caught_up(&a);
        if delivered(&a.path("out")).get(&9999) != Some(&1) {
            failures.push(format!("{}: the new record was not delivered once", d.name));
        }
        let status = a.stop();
        if !status.success() {
            failures.push(format!("{}: stop exited {status}:\n{}", d.name, a.stderr()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn garbled_cursor_files_redeliver_rather_than_lose() {
    let (mut a, otlp) = otlp_agent(true);
    a.start();
    a.wait_ready();
    for i in 0..20 {
        assert_eq!(post(&otlp, &logs_request(&record_body(i))), 200);
    }
    wait_caught_up(&a);
    assert!(a.stop().success(), "{}", a.stderr());

    let log = a.data_dir().join("log");
    for slot in ["cursors.0", "cursors.1"] {
        let p = log.join(slot);
        let len = std::fs::metadata(&p)
            .map(|m| m.len() as usize)
            .unwrap_or(64);
        std::fs::write(&p, vec![0xa5; len.max(24)]).unwrap();
    }
    let v = a.inspect_json();
    assert_eq!(v["corruption"]["damaged_cursor_files"], 2, "{v}");

    a.start();
    a.wait_ready();
    for i in 20..25 {
        assert_eq!(post(&otlp, &logs_request(&record_body(i))), 200);
    }
    wait_caught_up(&a);
    let stderr = a.stderr();
    assert!(
        stderr.contains("cursor file") && stderr.contains("is damaged"),
        "{stderr}"
    );
    assert!(stderr.contains("no readable cursor file"), "{stderr}");
    assert_eq!(
        a.metric("holdfast_log_damaged_cursor_files_total"),
        Some(2.0)
    );
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    let got = delivered(&a.path("out"));
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (0..25).collect::<Vec<_>>(),
        "nothing lost"
    );
    // Redelivered from the oldest event; the file sink drops what its
    // newest output file already holds.
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    assert!(a.stop().success(), "{}", a.stderr());

    // Only the newer slot damaged: the older one is used, nothing is said
    // about every consumer starting over.
    let generation = |slot: &str| {
        std::fs::read(log.join(slot))
            .ok()
            .filter(|b| b.len() >= 16 && &b[..4] == b"HFCU")
            .map(|b| u64::from_le_bytes(b[8..16].try_into().unwrap()))
    };
    let newer = ["cursors.0", "cursors.1"]
        .into_iter()
        .max_by_key(|s| generation(s))
        .unwrap();
    assert!(generation("cursors.0").is_some() && generation("cursors.1").is_some());
    rewrite(&log.join(newer), |b| {
        let n = b.len();
        b[n - 1] ^= 0xff;
    });
    a.start(); // a fresh stderr.log
    a.wait_ready();
    assert_eq!(post(&otlp, &logs_request(&record_body(25))), 200);
    wait_caught_up(&a);
    assert_eq!(
        a.metric("holdfast_log_damaged_cursor_files_total"),
        Some(1.0)
    );
    let new = a.stderr();
    assert!(new.contains(newer) && new.contains("is damaged"), "{new}");
    assert!(!new.contains("no readable cursor file"), "{new}");
    let got = delivered(&a.path("out"));
    assert_eq!(got.len(), 26);
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    assert!(a.stop().success(), "{}", a.stderr());
}

#[test]
fn a_garbled_checkpoint_is_set_aside_and_no_line_is_appended_twice() {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n",
        app.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    let lines = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| format!("line {i:04} of the app\n"))
            .collect()
    };
    std::fs::write(&app, lines(0, 50)).unwrap();
    a.start();
    a.wait_ready();
    wait_for("50 lines in the log", Duration::from_secs(30), || {
        (a.metric("holdfast_source_events_total{source=\"app\"}")? == 50.0).then_some(())
    });
    assert!(a.stop().success(), "{}", a.stderr());

    let dir = a.data_dir().join("checkpoints/app");
    let cp = dir.join("checkpoint.json");
    assert!(cp.exists(), "a checkpoint was written");
    rewrite(&cp, |b| {
        let n = b.len();
        b[n / 2..].fill(b'#');
    });
    let mut f = std::fs::OpenOptions::new().append(true).open(&app).unwrap();
    f.write_all(lines(50, 60).as_bytes()).unwrap();
    drop(f);

    a.start();
    a.wait_ready();
    wait_for(
        "the 10 new lines in the log",
        Duration::from_secs(30),
        || (a.metric("holdfast_source_events_total{source=\"app\"}")? >= 10.0).then_some(()),
    );
    assert_eq!(
        a.metric("holdfast_file_source_checkpoint_errors_total{source=\"app\"}"),
        Some(1.0)
    );
    assert!(dir.join("checkpoint.json.damaged").exists());
    let stderr = a.stderr();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("checkpoint") && l.contains("damaged")),
        "{stderr}"
    );
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert!(a.stop().success(), "{}", a.stderr());

    let out = holdfast(&["dump", "--config", a.config_arg()]);
    let mut count = BTreeMap::new();
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let body = v["record"]["body"]["stringValue"]
            .as_str()
            .unwrap()
            .to_string();
        *count.entry(body).or_insert(0) += 1;
    }
    let want: BTreeMap<String, i32> = lines(0, 60).lines().map(|l| (l.to_string(), 1)).collect();
    assert_eq!(count, want, "every line once, rebuilt from the log");
}

#[test]
fn a_second_instance_on_the_same_data_dir_is_refused_and_the_first_keeps_serving() {
    let (mut a, otlp) = otlp_agent(false);
    a.start();
    a.wait_ready();
    assert_eq!(post(&otlp, &logs_request(&record_body(0))), 200);

    // The same data_dir, every port different.
    let second = a.path("second.toml");
    let other_otlp = format!("127.0.0.1:{}", free_port());
    let text = std::fs::read_to_string(&a.config)
        .unwrap()
        .replace(&a.api.to_string(), &format!("127.0.0.1:{}", free_port()))
        .replace(&otlp, &other_otlp);
    std::fs::write(&second, text).unwrap();
    let (code, stderr) = run_to_exit(second.to_str().unwrap());
    assert_eq!(code, Some(1), "{stderr}");
    let log_dir = a.data_dir().join("log").display().to_string();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("locked by another process")
                && l.contains(&log_dir)
                && l.contains("data_dir")),
        "{stderr}"
    );
    assert!(
        std::net::TcpStream::connect(&other_otlp).is_err(),
        "the refused instance left nothing listening"
    );

    // The first is unharmed: ready, taking data, its log intact.
    assert!(a.try_exit().is_none());
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert_eq!(post(&otlp, &logs_request(&record_body(1))), 200);
    assert_eq!(a.metric("holdfast_log_next_sequence"), Some(2.0));
    assert!(a.stop().success(), "{}", a.stderr());
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

/// State that is not damaged bytes but the wrong kind of file: the log
/// cannot be opened at all, so `run` refuses at once (exit 1) naming the
/// file and data_dir, rather than start without its log.
#[test]
fn state_files_of_the_wrong_kind_are_refused_naming_the_file() {
    type Setup = fn(&Path);
    let rows: [(&str, Setup, &[&str]); 4] = [
        (
            "the lock file is a directory",
            |log| std::fs::create_dir_all(log.join("LOCK")).unwrap(),
            &["LOCK", "Is a directory"],
        ),
        (
            "a segment is a directory",
            |log| std::fs::create_dir_all(log.join("00000000000000000000.seg")).unwrap(),
            &["00000000000000000000.seg", "Is a directory"],
        ),
        (
            "a cursor slot is a directory",
            |log| std::fs::create_dir_all(log.join("cursors.0")).unwrap(),
            &["cursors.0", "Is a directory"],
        ),
        (
            "the log directory is a file",
            |log| std::fs::write(log, b"not a directory").unwrap(),
            &["creating log directory", "File exists"],
        ),
    ];
    for (name, setup, words) in rows {
        let a = Agent::new("");
        let log = a.data_dir().join("log");
        std::fs::create_dir_all(a.data_dir()).unwrap();
        setup(&log);
        let (code, stderr) = run_to_exit(a.config_arg());
        assert_eq!(code, Some(1), "{name}: {stderr}");
        let first = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{name}: no error line: {stderr}"));
        assert!(
            first.contains("opening the log") && first.contains("data_dir"),
            "{name}: {stderr}"
        );
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("caused by") && words.iter().all(|w| l.contains(w))),
            "{name}: {stderr}"
        );
        assert!(
            http_get(a.api, "/healthz").is_none(),
            "{name}: nothing left serving"
        );
    }
}

/// A checkpoint that is not a file at all cannot be set aside like damaged
/// bytes: the source fails and is retried, `/readyz` answers 503 naming it
/// and the checkpoint directory, the rest of the agent runs, and once the
/// path is cleared the source starts and reads the file.
#[test]
fn a_checkpoint_that_is_a_directory_keeps_the_source_unready_until_cleared() {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    std::fs::write(&app, "one line\n").unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n",
        app.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    let cp = a.data_dir().join("checkpoints/app/checkpoint.json");
    std::fs::create_dir_all(&cp).unwrap();

    a.start();
    let api = a.api;
    let (_, why) = wait_for(
        "/readyz to name the source",
        Duration::from_secs(30),
        || http_get(api, "/readyz").filter(|(s, _)| *s == 503),
    );
    assert!(
        why.contains("source:app") && why.contains("checkpoint"),
        "{why}"
    );
    assert_eq!(http_get(api, "/healthz").unwrap().0, 200);

    std::fs::remove_dir(&cp).unwrap();
    wait_for("the line in the log", Duration::from_secs(30), || {
        (a.metric("holdfast_source_events_total{source=\"app\"}")? == 1.0).then_some(())
    });
    wait_for("/readyz to turn 200", Duration::from_secs(10), || {
        http_get(api, "/readyz").filter(|(s, _)| *s == 200)
    });
    assert!(a.stop().success(), "{}", a.stderr());
}
