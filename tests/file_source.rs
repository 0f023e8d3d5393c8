//! The `file` source run in-process against a real log: lines, bad lines,
//! identity, rotation, restarts, checkpoint damage and back-pressure. Each
//! test is a short story; the harness is in `file_source_common/`.

mod file_source_common;

use std::fs;
use std::time::Duration;

use file_source_common::*;
use holdfast::event::EventId;
use holdfast::seglog::{LogOptions, StartAt as LogStartAt, WhenFull};
use holdfast::sources::file::{self, checkpoint, Multiline, StartAt};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

const T: Duration = Duration::from_secs(20);

/// Every line of every Loghub sample arrives exactly once, with its file
/// attributes, origin and stable id, including the last lines that have no
/// newline (emitted once the file is idle) and the CRLF line ends most of
/// them use. A restart appends nothing again; new lines arrive after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_loghub_line_arrives_once() {
    let h = Harness::new();
    let mut want = Vec::new();
    for (name, bytes) in loghub() {
        fs::write(h.path(&name), &bytes).unwrap();
        want.extend(expected_lines(&bytes));
    }
    let src = h.start(h.options("*.log"));
    h.wait_events(want.len() as u64, T).await;
    src.stop().await;
    let envs = h.envelopes();
    assert_each_once(&h.bodies(), &want);

    for e in &envs {
        assert_eq!(e.source, SOURCE);
        let o = e.origin.as_ref().unwrap();
        assert_eq!(
            e.event_id(),
            Some(EventId::for_file_line(
                o.fingerprint,
                o.generation,
                o.offset
            ))
        );
        assert_eq!(
            attr(e, file::ATTR_PATH),
            Some(Value::StringValue(o.path.clone()))
        );
        let name = std::path::Path::new(&o.path)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(attr(e, file::ATTR_NAME), Some(Value::StringValue(name)));
        assert!(e.observed_time_unix_nano > 0);
        let host = &e.resource.as_ref().unwrap().attributes[0];
        assert_eq!(host.key, "host.name");
        assert_eq!(e.scope.as_ref().unwrap().name, file::SCOPE_NAME);
    }
    // Ids are distinct.
    let ids: std::collections::HashSet<_> = envs.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), envs.len());
    assert_eq!(h.metric("holdfast_file_source_files_watched"), 16.0);
    assert_eq!(h.metric("holdfast_source_events_total"), want.len() as f64);

    // A restart repeats nothing; a new line arrives.
    let before = h.log.next_seq();
    let src = h.start(h.options("*.log"));
    append(&h.path("Apache_2k.log"), b"\nafter the restart\n");
    h.wait_events(before + 1, T).await;
    src.stop().await;
    assert_eq!(h.log.next_seq(), before + 1);
    assert_eq!(h.bodies().last().unwrap(), "after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crlf_and_empty_lines() {
    let h = Harness::new();
    fs::write(h.path("a.log"), b"one\r\ntwo\r\n\r\n\nthree\n  \n").unwrap();
    let src = h.start(h.options("*.log"));
    h.wait_events(4, T).await;
    src.stop().await;
    assert_eq!(h.bodies(), ["one", "two", "three", "  "]);
}

/// Longer lines keep `max_line_bytes` (cut at a character boundary), are
/// marked with their original size, and counted; the next line is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lines_are_truncated_marked_and_counted() {
    let h = Harness::new();
    let long = format!("{}é{}", "x".repeat(99), "y".repeat(900));
    fs::write(h.path("a.log"), format!("{long}\nshort\n")).unwrap();
    let src = h.start(file::FileSourceOptions {
        max_line_bytes: 100,
        ..h.options("*.log")
    });
    h.wait_events(2, T).await;
    src.stop().await;
    let envs = h.envelopes();
    assert_eq!(body(&envs[0]), "x".repeat(99));
    assert_eq!(
        attr(&envs[0], file::ATTR_TRUNCATED),
        Some(Value::BoolValue(true))
    );
    assert_eq!(
        attr(&envs[0], file::ATTR_ORIGINAL_BYTES),
        Some(Value::IntValue(1001))
    );
    assert_eq!(body(&envs[1]), "short");
    assert_eq!(attr(&envs[1], file::ATTR_TRUNCATED), None);
    assert_eq!(h.metric("holdfast_file_source_truncated_lines_total"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_is_kept_marked_and_counted() {
    let h = Harness::new();
    fs::write(h.path("a.log"), b"ok \xff\xfe end\nfine\n").unwrap();
    let src = h.start(h.options("*.log"));
    h.wait_events(2, T).await;
    src.stop().await;
    let envs = h.envelopes();
    assert_eq!(body(&envs[0]), "ok \u{fffd}\u{fffd} end");
    assert_eq!(
        attr(&envs[0], file::ATTR_INVALID_UTF8),
        Some(Value::BoolValue(true))
    );
    assert_eq!(attr(&envs[1], file::ATTR_INVALID_UTF8), None);
    assert_eq!(
        h.metric("holdfast_file_source_invalid_utf8_lines_total"),
        1.0
    );
}

/// 16 MiB without a newline: memory stays bounded (one truncated line is
/// kept), the line is emitted once the file is idle, and what follows it
/// after the writer resumes is read as new lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_is_bounded_and_emitted_when_idle() {
    let h = Harness::new();
    let p = h.path("a.log");
    append(&p, b"before\n");
    let src = h.start(file::FileSourceOptions {
        max_line_bytes: 1024,
        line_idle_timeout: Duration::from_millis(300),
        ..h.options("*.log")
    });
    h.wait_events(1, T).await;
    let chunk = vec![b'z'; 1 << 20];
    for _ in 0..16 {
        append(&p, &chunk);
    }
    h.wait_events(2, T).await;
    append(&p, b"\nnext\n");
    h.wait_events(3, T).await;
    src.stop().await;
    let envs = h.envelopes();
    assert_eq!(envs.len(), 3);
    assert_eq!(body(&envs[1]), "z".repeat(1024));
    assert_eq!(
        attr(&envs[1], file::ATTR_ORIGINAL_BYTES),
        Some(Value::IntValue(16 << 20))
    );
    assert_eq!(body(&envs[2]), "next");
    assert_eq!(
        h.metric("holdfast_file_source_read_bytes_total"),
        (7 + (16 << 20) + 6) as f64
    );
}

/// A file shorter than the fingerprint is read at once; as it grows past
/// the fingerprint its identity settles, across a restart, without a line
/// lost or repeated, and it is still recognised after a rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_shorter_than_the_fingerprint_is_read_and_settles() {
    let h = Harness::new();
    let p = h.path("a.log");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        ..h.options("a.log*")
    };
    append(&p, b"a\n");
    let src = h.start(opts.clone());
    h.wait_events(1, T).await;
    append(&p, b"b\n");
    h.wait_events(2, T).await;
    src.stop().await;

    let (more, lines) = numbered("grow", 0, 5);
    append(&p, &more);
    let src = h.start(opts.clone());
    h.wait_events(7, T).await;
    // Settled: the checkpoint's prefix now covers the whole fingerprint.
    h.wait_metric("holdfast_source_events_total", 7.0, T).await;
    fs::rename(&p, h.path("a.log.1")).unwrap();
    h.wait_metric("holdfast_file_source_rotations_total", 1.0, T)
        .await;
    append(&h.path("a.log.1"), b"after rename\n");
    h.wait_events(8, T).await;
    src.stop().await;
    let ck = fs::read(h.checkpoints.join(checkpoint::FILE)).unwrap();
    let ck = checkpoint::decode(&ck, SOURCE).unwrap();
    assert_eq!(ck.records.len(), 1);
    assert_eq!(ck.records[0].prefix_len, 64);
    assert!(ck.records[0].path.ends_with("a.log.1"));
    let mut want = vec!["a".to_string(), "b".to_string()];
    want.extend(lines);
    want.push("after rename".into());
    assert_eq!(h.bodies(), want);
}

/// A file deleted while holdfast has it open is read to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_deleted_while_open_is_read_to_its_end() {
    let h = Harness::new();
    let p = h.path("a.log");
    let (first, mut want) = numbered("del", 0, 10);
    append(&p, &first);
    let src = h.start(h.options("*.log"));
    h.wait_events(10, T).await;
    let (rest, lines) = numbered("del", 10, 1000);
    // Written and deleted at once: only the open descriptor still has it.
    let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    std::io::Write::write_all(&mut f, &rest).unwrap();
    drop(f);
    want.extend(lines);
    h.wait_events(1010, T).await;
    h.wait_metric("holdfast_file_source_rotations_total", 1.0, T)
        .await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// Rename-and-create with only the live name matching: the old file is read
/// through its open descriptor (including lines written to it after the
/// rename), the new file from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_rotation_reads_the_old_file_to_its_end() {
    let h = Harness::new();
    let p = h.path("app.log");
    let src = h.start(h.options("app.log"));
    let (a, mut want) = numbered("old", 0, 1000);
    append(&p, &a);
    h.wait_events(1, T).await;
    let mut old = fs::OpenOptions::new().append(true).open(&p).unwrap();
    fs::rename(&p, h.path("app.log.1")).unwrap();
    let (b, lines) = numbered("old", 1000, 100);
    std::io::Write::write_all(&mut old, &b).unwrap();
    want.extend(lines);
    let (c, lines) = numbered("new", 0, 1000);
    append(&p, &c);
    want.extend(lines);
    h.wait_events(2100, T).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// copytruncate by hand: lines the source had not read yet when the file
/// was copied and truncated are read from the copy (it matches the globs),
/// the truncated file continues as a new generation, nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_continues_from_the_copy_and_starts_a_new_generation() {
    let h = Harness::new();
    let p = h.path("app.log");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        ..h.options("app.log*")
    };
    let src = h.start(opts);
    let (a, mut want) = numbered("gen0", 0, 100);
    append(&p, &a);
    h.wait_events(100, T).await;
    // Lines the source may not have read before the copy is taken.
    let (b, lines) = numbered("gen0", 100, 500);
    append(&p, &b);
    want.extend(lines);
    fs::copy(&p, h.path("app.log.1")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (c, lines) = numbered("gen1", 0, 50);
    append(&p, &c);
    want.extend(lines);
    h.wait_events(650, T).await;
    h.wait_metric("holdfast_file_source_truncations_total", 1.0, T)
        .await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
    let gens: std::collections::HashSet<u32> = h
        .envelopes()
        .iter()
        .map(|e| e.origin.as_ref().unwrap().generation)
        .collect();
    assert_eq!(gens, [0, 1].into());
}

/// copytruncate while holdfast is stopped: the copy is recognised by its
/// first bytes and continued from the checkpointed position; the truncated
/// file is a new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_while_stopped_continues_from_the_copy() {
    let h = Harness::new();
    let p = h.path("app.log");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        ..h.options("app.log*")
    };
    let (a, mut want) = numbered("gen0", 0, 100);
    append(&p, &a);
    let src = h.start(opts.clone());
    h.wait_events(100, T).await;
    src.stop().await;
    let (b, lines) = numbered("gen0", 100, 500);
    append(&p, &b);
    want.extend(lines);
    fs::copy(&p, h.path("app.log.1")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (c, lines) = numbered("gen1", 0, 50);
    append(&p, &c);
    want.extend(lines);
    let src = h.start(opts);
    h.wait_events(650, T).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
    assert_eq!(h.metric("holdfast_file_source_truncations_total"), 1.0);
}

/// copytruncate's copy found while it is still empty (logrotate creates it,
/// then writes it): followed as a new, empty file at first, it is
/// identified again when its first bytes arrive and continues the original
/// stream; no line is read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_found_empty_is_recognised_once_written() {
    let h = Harness::new();
    let p = h.path("app.log");
    let copy = h.path("app.log.1");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        ..h.options("app.log*")
    };
    let (a, mut want) = numbered("gen0", 0, 100);
    append(&p, &a);
    let src = h.start(opts);
    h.wait_events(100, T).await;
    let (b, lines) = numbered("gen0", 100, 500);
    append(&p, &b);
    want.extend(lines);
    fs::File::create(&copy).unwrap();
    // The source follows the empty copy as a file of its own.
    h.wait_metric("holdfast_file_source_files_watched", 2.0, T)
        .await;
    append(&copy, &fs::read(&p).unwrap());
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (c, lines) = numbered("gen1", 0, 50);
    append(&p, &c);
    want.extend(lines);
    h.wait_events(650, T).await;
    h.wait_metric("holdfast_file_source_truncations_total", 1.0, T)
        .await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// copytruncate while the file ends in an unfinished line (the
/// application's write was only partly visible when the source read it):
/// the copy holds the whole line, and the line arrives whole, once, not cut
/// where the source's read stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_under_an_unfinished_line_keeps_it_whole() {
    let h = Harness::new();
    let p = h.path("app.log");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        // Far longer than the test: the unfinished line is never emitted
        // for being quiet.
        line_idle_timeout: Duration::from_secs(600),
        ..h.options("app.log*")
    };
    let (a, mut want) = numbered("gen0", 0, 100);
    append(&p, &a);
    append(&p, b"gen0 the last line, writ");
    let src = h.start(opts);
    h.wait_events(100, T).await;
    let len = fs::metadata(&p).unwrap().len();
    h.wait_metric("holdfast_file_source_read_bytes_total", len as f64, T)
        .await;
    // What logrotate copies once the write has finished, and the truncation.
    let tmp = h.path("copy.tmp");
    let mut whole = fs::read(&p).unwrap();
    whole.extend_from_slice(b"ten at last\n");
    fs::write(&tmp, &whole).unwrap();
    want.push("gen0 the last line, written at last".into());
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (c, lines) = numbered("gen1", 0, 50);
    append(&p, &c);
    want.extend(lines);
    fs::rename(&tmp, h.path("app.log.1")).unwrap();
    h.wait_events(151, T).await;
    h.wait_metric("holdfast_file_source_truncations_total", 1.0, T)
        .await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// Rotation while holdfast is stopped: the rest of the rotated file is read
/// (its new name matches the globs), then the new file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_while_stopped_reads_the_rest_of_the_rotated_file() {
    let h = Harness::new();
    let p = h.path("app.log");
    let (a, mut want) = numbered("old", 0, 200);
    append(&p, &a);
    let src = h.start(h.options("app.log*"));
    h.wait_events(200, T).await;
    src.stop().await;
    let (b, lines) = numbered("old", 200, 300);
    append(&p, &b);
    want.extend(lines);
    fs::rename(&p, h.path("app.log.1")).unwrap();
    let (c, lines) = numbered("new", 0, 300);
    append(&p, &c);
    want.extend(lines);
    let src = h.start(h.options("app.log*"));
    h.wait_events(800, T).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// A deleted file's inode reused by a new file (while holdfast was stopped,
/// the only time the inode can be free) is a new file: read from its start,
/// not from the old file's offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_inode_is_a_new_file() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    let p = h.path("a.log");
    let (a, mut want) = numbered("first", 0, 100);
    append(&p, &a);
    let src = h.start(h.options("*.log"));
    h.wait_events(100, T).await;
    src.stop().await;
    let ino = fs::metadata(&p).unwrap().ino();
    fs::remove_file(&p).unwrap();
    // Ask the file system for the freed inode until it hands it out again
    // (ext4 and tmpfs usually do at once).
    let (b, lines) = numbered("second", 0, 150);
    let mut reused = false;
    for i in 0..200 {
        let q = h.path(&format!("b{i}.log"));
        fs::write(&q, &b).unwrap();
        reused = fs::metadata(&q).unwrap().ino() == ino;
        // The last try stays whatever its inode (other processes may take
        // the freed one first): the story then is a plain new file.
        if reused || i == 199 {
            break;
        }
        fs::remove_file(&q).unwrap();
    }
    eprintln!("inode {ino} reused: {reused}");
    want.extend(lines);
    let src = h.start(h.options("*.log"));
    h.wait_events(250, T).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// A damaged checkpoint is reported (metric, moved aside) and not used;
/// positions are rebuilt from the log, so nothing is appended twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_checkpoint_is_reported_and_positions_come_from_the_log() {
    let h = Harness::new();
    let p = h.path("a.log");
    let (a, mut want) = numbered("line", 0, 300);
    append(&p, &a);
    let src = h.start(h.options("*.log"));
    h.wait_events(300, T).await;
    src.stop().await;
    let ck = h.checkpoints.join(checkpoint::FILE);
    let mut bytes = fs::read(&ck).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x04;
    fs::write(&ck, &bytes).unwrap();
    let (b, lines) = numbered("line", 300, 100);
    append(&p, &b);
    want.extend(lines);
    let src = h.start(h.options("*.log"));
    h.wait_events(400, T).await;
    src.stop().await;
    assert_eq!(
        h.metric("holdfast_file_source_checkpoint_errors_total"),
        1.0
    );
    assert_eq!(
        fs::read(h.checkpoints.join(checkpoint::DAMAGED)).unwrap(),
        bytes
    );
    assert!(checkpoint::decode(&fs::read(&ck).unwrap(), SOURCE).is_ok());
    assert_each_once(&h.bodies(), &want);
}

/// `start_at = "end"` skips what files held at the very first start; lines
/// written later, and files appearing later, are read from their start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_end_applies_to_the_first_start_only() {
    let h = Harness::new();
    append(&h.path("a.log"), b"old 1\nold 2\n");
    let opts = file::FileSourceOptions {
        start_at: StartAt::End,
        ..h.options("*.log")
    };
    let src = h.start(opts.clone());
    // The first scan has run once the checkpoint exists.
    let deadline = std::time::Instant::now() + T;
    while !h.checkpoints.join(checkpoint::FILE).exists() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    append(&h.path("a.log"), b"new 1\n");
    append(&h.path("b.log"), b"b 1\n");
    h.wait_events(2, T).await;
    src.stop().await;
    append(&h.path("a.log"), b"new 2\n");
    let src = h.start(opts);
    h.wait_events(3, T).await;
    src.stop().await;
    let mut got = h.bodies();
    got.sort();
    assert_eq!(got, ["b 1", "new 1", "new 2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiline_events_join_stack_traces() {
    let h = Harness::new();
    append(
        &h.path("a.log"),
        b"2024-01-01 ERROR boom\n  at a.b(C.java:1)\n  at d.e(F.java:2)\n2024-01-01 INFO ok\n",
    );
    let src = h.start(file::FileSourceOptions {
        multiline: Some(Multiline {
            start_pattern: regex::Regex::new(r"^\d{4}-\d{2}-\d{2} ").unwrap(),
            timeout: Duration::from_millis(200),
        }),
        ..h.options("*.log")
    });
    h.wait_events(2, T).await;
    src.stop().await;
    assert_eq!(
        h.bodies(),
        [
            "2024-01-01 ERROR boom\n  at a.b(C.java:1)\n  at d.e(F.java:2)",
            "2024-01-01 INFO ok"
        ]
    );
    assert_eq!(h.metric("holdfast_file_source_lines_total"), 4.0);
}

/// Stopping mid-file and starting again (what a supervisor does after an
/// error) resumes exactly where the acknowledged lines end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_restart_in_process_resumes_exactly() {
    let h = Harness::new();
    let mut want = Vec::new();
    for i in 0..4 {
        let (b, lines) = numbered(&format!("f{i}"), 0, 20_000);
        append(&h.path(&format!("f{i}.log")), &b);
        want.extend(lines);
    }
    for _ in 0..5 {
        let src = h.start(h.options("*.log"));
        h.wait_events((h.log.next_seq() + 1).min(want.len() as u64), T)
            .await;
        src.stop().await;
    }
    let src = h.start(h.options("*.log"));
    h.wait_events(want.len() as u64, T).await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// A full log under `when_full = "block"` pauses reading (memory stays
/// bounded: the source reads little beyond what the log took); once a sink
/// frees space every line arrives, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_pauses_reading_until_space_is_freed() {
    let h = Harness::with_log_options(LogOptions {
        segment_bytes: 64 << 10,
        max_bytes: 256 << 10,
        when_full: WhenFull::Block,
        append_timeout: Duration::from_millis(100),
        // Numbered lines compress to almost nothing: uncompressed, they
        // fill the log.
        compression: holdfast::seglog::Compression::None,
        ..log_options()
    });
    let mut sink = h.log.consumer("sink", LogStartAt::Oldest).unwrap();
    let (bytes, want) = numbered("bp", 0, 60_000);
    let total = bytes.len() as f64;
    append(&h.path("a.log"), &bytes);
    let src = h.start(h.options("*.log"));
    let deadline = std::time::Instant::now() + T;
    while h.log.stats().counters.full_rejections == 0 {
        assert!(std::time::Instant::now() < deadline, "the log never filled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let read = h.metric("holdfast_file_source_read_bytes_total");
    assert!(
        read < (2 << 20) as f64 && read < total / 2.0,
        "read {read} bytes of {total} while the log was full"
    );
    // The sink drains; reading resumes.
    let mut got = Vec::new();
    while got.len() < want.len() {
        let events = tokio::time::timeout(T, sink.read_wait(10_000, 1 << 20))
            .await
            .expect("lines stopped arriving")
            .unwrap();
        for e in &events {
            got.push(body(&envelope(e)));
        }
        sink.commit(events.last().unwrap().seq + 1).unwrap();
    }
    src.stop().await;
    assert_each_once(&got, &want);
}

/// The log as a crash leaves it after an append refused as full was
/// overtaken by a later one (`when_full = "block"`, several appends in
/// flight): of `a.log`'s 30 lines, 0-9 and 20-29 are in the log, 10-19 are
/// not; the checkpoint covers lines 0-9 and its `log_seq` is where the
/// refused append would have landed. Built from the events a first run
/// appended to another log, so they carry the ids and origins the source
/// gives them. Returns the 30 lines.
async fn overtaken_append_state(h: &Harness) -> Vec<String> {
    let (bytes, want) = numbered("ot", 0, 30);
    append(&h.path("a.log"), &bytes);
    let first = holdfast::seglog::Log::open(h.tmp.path().join("first-log"), log_options()).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(file::run(
        SOURCE.to_string(),
        h.options("*.log"),
        first.clone(),
        h.metrics.clone(),
        stop.clone(),
    ));
    let deadline = std::time::Instant::now() + T;
    while first.next_seq() < 30 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run appended {} lines",
            first.next_seq()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    task.await.unwrap().unwrap();
    let events = first.reader(0).read(100, 1 << 20).unwrap();
    assert_eq!(events.len(), 30);
    for range in [0..10, 20..30] {
        let mut b = holdfast::seglog::Batch::new();
        for e in &events[range] {
            // Each whole (format 1): a batch has one context, and these
            // may come from several.
            b.push(&prost::Message::encode_to_vec(&envelope(e)));
        }
        h.log.append(b).await.unwrap();
    }
    let tenth = envelope(&events[9]);
    let checkpoint::Loaded::Found(mut ck) = checkpoint::load(&h.checkpoints, SOURCE).unwrap()
    else {
        panic!("the first run wrote no checkpoint");
    };
    assert_eq!(ck.records.len(), 1);
    ck.records[0].offset = tenth.origin.unwrap().end_offset;
    ck.log_seq = 10;
    checkpoint::save(&h.checkpoints, &ck).unwrap();
    want
}

/// Lines that reached the log past an append refused as full (which never
/// landed before the crash) are not appended again after the restart; the
/// refused lines are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_overtook_a_refused_append_are_not_appended_again() {
    let h = Harness::new();
    let want = overtaken_append_state(&h).await;
    let src = h.start(h.options("*.log"));
    // The first run read 30 lines; this one reads the 20 past the checkpoint.
    h.wait_metric("holdfast_file_source_lines_total", 50.0, T)
        .await;
    src.stop().await;
    assert_each_once(&h.bodies(), &want);
}

/// The same, with one more restart in between while the log is full: that
/// run appends nothing and stops with a checkpoint whose `log_seq` is past
/// the lines that overtook the refused append, so the checkpoint itself must
/// remember them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_overtook_a_refused_append_are_remembered_across_restarts() {
    let h = Harness::with_log_options(LogOptions {
        segment_bytes: 64 << 10,
        max_bytes: 256 << 10,
        when_full: WhenFull::Block,
        append_timeout: Duration::from_millis(100),
        ..log_options()
    });
    let mut sink = h.log.consumer("sink", LogStartAt::Oldest).unwrap();
    let want = overtaken_append_state(&h).await;
    // Fill the log with another source's events until it refuses one.
    let filler = holdfast::event::Envelope {
        id: vec![7; 16],
        source: "filler".into(),
        record: Some(holdfast::event::Record::Log(Default::default())),
        ..Default::default()
    };
    let filler_bytes = {
        // A string field carries the padding.
        let mut f = filler.clone();
        f.scope_schema_url = "x".repeat(1000);
        prost::Message::encode_to_vec(&f)
    };
    loop {
        let mut b = holdfast::seglog::Batch::new();
        b.push(&filler_bytes);
        match h.log.append_timeout(b, Duration::from_millis(10)).await {
            Ok(_) => {}
            Err(holdfast::seglog::LogError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let refused = h.log.stats().counters.full_rejections;
    let src = h.start(h.options("*.log"));
    let deadline = std::time::Instant::now() + T;
    while h.log.stats().counters.full_rejections == refused {
        assert!(
            std::time::Instant::now() < deadline,
            "the source never tried to append"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    src.stop().await;
    let checkpoint::Loaded::Found(ck) = checkpoint::load(&h.checkpoints, SOURCE).unwrap() else {
        panic!("no checkpoint");
    };
    assert!(
        ck.log_seq >= 20,
        "the checkpoint still reaches back to the lines past the gap: {}",
        ck.log_seq
    );

    // A sink drains the log; the source runs again.
    fn drain(sink: &mut holdfast::seglog::Consumer, got: &mut Vec<String>) {
        loop {
            let events = sink.read(10_000, 16 << 20).unwrap();
            let Some(last) = events.last() else { return };
            for e in &events {
                let env = envelope(e);
                if env.source == SOURCE {
                    got.push(body(&env));
                }
            }
            sink.commit(last.seq + 1).unwrap();
        }
    }
    let mut got = Vec::new();
    drain(&mut sink, &mut got);
    // The second run read as many lines as it had time for before it saw the
    // log full; this one reads the 20 past the checkpoint.
    let before = h.metric("holdfast_file_source_lines_total");
    let src = h.start(h.options("*.log"));
    h.wait_metric("holdfast_file_source_lines_total", before + 20.0, T)
        .await;
    src.stop().await;
    drain(&mut sink, &mut got);
    assert_each_once(&got, &want);
}
