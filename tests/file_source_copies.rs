//! copytruncate when the source finds the copy before it has read the
//! truncation: logrotate copies `app.log` to `app.log.1`, truncates
//! `app.log`, and the application writes on, all between two looks of the
//! source. The copy must be judged against the truncated file as it is now,
//! not as it was last read, or it looks like a new file and every line in
//! it is read a second time.
//!
//! Runs with inotify off, so that each turn of the source scans (and finds
//! the copy) before it reads the open files (and sees the truncation); its
//! own test binary, as that switch is process-wide.

mod file_source_common;

use std::fs;
use std::time::Duration;

use file_source_common::*;
use holdfast::sources::file;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_found_before_the_truncation_was_read_continues_its_stream() {
    // Only this test runs in this binary, so the variable reaches no other.
    std::env::set_var(file::POLL_ONLY_ENV, "1");
    let h = Harness::new();
    let p = h.path("app.log");
    let opts = file::FileSourceOptions {
        fingerprint_bytes: 64,
        ..h.options("app.log*")
    };
    let (a, mut want) = numbered("gen0", 0, 100);
    append(&p, &a);
    let src = h.start(opts);
    h.wait_events(100, T).await;
    // Lines the source has not read when the copy is taken (it reads a file
    // read to its end again only every 250 ms without inotify).
    let (b, lines) = numbered("gen0", 100, 500);
    append(&p, &b);
    want.extend(lines);
    // The copy is made under a name the globs do not match and renamed
    // last, so that it appears whole, after the truncation and the new
    // lines (fewer bytes than the copy holds).
    let tmp = h.path("copy.tmp");
    fs::copy(&p, &tmp).unwrap();
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
