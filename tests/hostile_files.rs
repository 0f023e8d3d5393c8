//! What a local user who can write into a tailed directory can do, through
//! the real binary (issue 26): a symlink to a file holdfast can read and
//! others cannot, a FIFO swapped over a tailed file, and the modes of the
//! state holdfast leaves under `data_dir`.

#[path = "common/daemon.rs"]
mod daemon;

use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use daemon::{read_to_string, wait_for, Agent};

/// State modes are checked as a umask of 022 leaves them, whatever the
/// umask this test runs under (a process-wide setting; every test here
/// wants the same).
fn umask_022() {
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe { libc::umask(0o022) };
}

/// An agent tailing `logs/*.log` into a `file` sink writing `out/`.
fn tailing(extra: &str) -> Agent {
    let a = Agent::new("");
    std::fs::create_dir(a.path("logs")).unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}/*.log\"]\nstart_at = \"beginning\"\n{extra}\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        a.path("logs").display(),
        a.path("out").display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a
}

fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// Everything the sink wrote so far.
fn shipped(a: &Agent) -> String {
    let Ok(entries) = std::fs::read_dir(a.path("out")) else {
        return String::new();
    };
    entries
        .flatten()
        .map(|e| read_to_string(&e.path()))
        .collect()
}

fn wait_shipped(a: &Agent, what: &str) {
    wait_for(
        &format!("{what:?} in the sink's output"),
        Duration::from_secs(30),
        || shipped(a).contains(what).then_some(()),
    );
}

fn skipped(a: &Agent, reason: &str) -> f64 {
    a.metric(&format!(
        "holdfast_file_source_skipped_files_total{{source=\"app\",reason=\"{reason}\"}}"
    ))
    .unwrap_or(-1.0)
}

#[test]
fn a_symlink_to_a_private_file_outside_the_globs_is_not_shipped_one_inside_is() {
    umask_022();
    let mut a = tailing("");
    let logs = a.path("logs");
    let secret = a.path("token");
    std::fs::write(&secret, "TOKEN-0123456789-SECRET\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    symlink(&secret, logs.join("evil.log")).unwrap();
    // A link whose target lies inside the globs' directory is followed.
    std::fs::write(logs.join("current.txt"), "line through an inside link\n").unwrap();
    symlink(logs.join("current.txt"), logs.join("good.log")).unwrap();
    append(&logs.join("real.log"), "a real line");

    a.start();
    a.wait_ready();
    wait_shipped(&a, "line through an inside link");
    wait_shipped(&a, "a real line");
    // Every file of the first scan is read by now; a later scan does not
    // change its mind either.
    append(&logs.join("real.log"), "a later line");
    wait_shipped(&a, "a later line");
    let out = shipped(&a);
    assert!(
        !out.contains("TOKEN-0123456789"),
        "the token was shipped:\n{out}"
    );
    assert_eq!(skipped(&a, "symlink_outside"), 1.0, "counted once");
    assert!(
        a.stderr().contains("evil.log"),
        "the skipped link is named in the log:\n{}",
        a.stderr()
    );
    assert!(a.stop().success());
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the call.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "mkfifo {p:?}"
    );
}

#[test]
fn a_fifo_swapped_over_an_idle_file_does_not_wedge_the_source() {
    umask_022();
    let mut a = tailing("idle_close = \"500ms\"\nscan_interval = \"1h\"");
    let logs = a.path("logs");
    let victims: Vec<PathBuf> = (0..5).map(|i| logs.join(format!("v{i}.log"))).collect();
    for v in &victims {
        append(v, &format!("first line of {}", v.display()));
    }
    append(&logs.join("other.log"), "other line 0");
    a.start();
    a.wait_ready();
    wait_shipped(&a, "other line 0");
    for v in &victims {
        wait_shipped(&a, &format!("first line of {}", v.display()));
    }
    wait_for("every file closed as idle", Duration::from_secs(30), || {
        (a.metric("holdfast_file_source_open_files{source=\"app\"}") == Some(0.0)).then_some(())
    });

    // Each FIFO replaces a closed file right after a scan, so that the
    // change is seen as "this followed file changed: reopen it" before the
    // next scan would see what it is now.
    std::fs::create_dir(a.path("fifos")).unwrap();
    for (i, v) in victims.iter().enumerate() {
        let fifo = a.path(&format!("fifos/{i}"));
        mkfifo(&fifo);
        std::fs::write(logs.join(format!("trigger-{i}")), "").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        std::fs::rename(&fifo, v).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }

    // The other file keeps flowing.
    for n in 1..=3 {
        append(&logs.join("other.log"), &format!("other line {n}"));
        wait_shipped(&a, &format!("other line {n}"));
    }
    wait_for("the FIFOs counted", Duration::from_secs(10), || {
        (skipped(&a, "not_regular") >= 1.0).then_some(())
    });
    let api = a.api;
    let (status, body) = daemon::http_get(api, "/readyz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ready\n"));

    // And a stop is prompt: the harness's shutdown_timeout is 10 s.
    let t = Instant::now();
    a.signal("TERM");
    let status = a.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{}", a.stderr());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "SIGTERM took {:?}",
        t.elapsed()
    );
}

#[test]
fn state_under_data_dir_is_private_under_umask_022() {
    umask_022();
    let mut a = tailing("");
    append(&a.path("logs/app.log"), "a line to make state");
    a.start();
    a.wait_ready();
    wait_shipped(&a, "a line to make state");
    // The sink's cursor and the source's checkpoint are written at the
    // latest on the stop.
    assert!(a.stop().success());

    let mut loose = Vec::new();
    let mut seen = 0;
    let mut dirs = vec![a.data_dir()];
    while let Some(d) = dirs.pop() {
        let mode = std::fs::symlink_metadata(&d).unwrap().permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            loose.push(format!("{} {mode:o}", d.display()));
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            seen += 1;
            if m.is_dir() {
                dirs.push(e.path());
            } else {
                let mode = m.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    loose.push(format!("{} {mode:o}", e.path().display()));
                }
            }
        }
    }
    assert!(seen >= 4, "segments, cursors, lock and checkpoint: {seen}");
    assert!(
        loose.is_empty(),
        "readable by others under data_dir:\n{}",
        loose.join("\n")
    );
}
