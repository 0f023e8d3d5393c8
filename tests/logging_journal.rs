//! Logging through the real binary: under the journal (`JOURNAL_STREAM`
//! naming stderr's device and inode) every line starts with its sd-daemon
//! priority and carries no timestamp; elsewhere (even with the variable
//! inherited but stderr redirected) lines keep their timestamps; a fatal
//! error is printed once; a dead receiver's repeated warning ends in a
//! "… N more in the last …" line.

#[path = "common/daemon.rs"]
mod daemon;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use daemon::{http_get, wait_for, Agent, BIN};

/// Starts `holdfast run` with stderr into `err` and the extra environment.
fn spawn(config: &Path, err: &Path, env: &[(&str, String)]) -> Child {
    let file = std::fs::File::create(err).unwrap();
    Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .env_remove("JOURNAL_STREAM")
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("starting holdfast run")
}

/// `DEV:INODE` of a file, as systemd writes `JOURNAL_STREAM`.
fn dev_ino(p: &Path) -> String {
    let m = std::fs::metadata(p).unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

fn wait_ready(a: &Agent, child: &mut Child, err: &Path) {
    let api = a.api;
    wait_for("/readyz to answer 200", Duration::from_secs(30), || {
        if let Some(s) = child.try_wait().unwrap() {
            panic!("exited ({s}): {}", daemon::read_to_string(err));
        }
        http_get(api, "/readyz").filter(|(s, _)| *s == 200)
    });
}

fn stop(child: &mut Child) {
    let ok = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    wait_for("holdfast to exit", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
}

#[test]
fn journal_lines_carry_priorities_and_others_timestamps() {
    let a = Agent::new("");
    let err = a.path("journal.log");
    // The file exists before the child starts, so its inode is known.
    std::fs::File::create(&err).unwrap();
    let journal = dev_ino(&err);
    let mut child = spawn(&a.config, &err, &[("JOURNAL_STREAM", journal)]);
    wait_ready(&a, &mut child, &err);
    stop(&mut child);
    let text = daemon::read_to_string(&err);
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        let p = line
            .strip_prefix('<')
            .and_then(|r| r.split_once('>'))
            .map(|(n, _)| n);
        assert!(
            matches!(p, Some("3" | "4" | "6" | "7")),
            "a priority prefix: {line}"
        );
        assert!(
            !line[3..].trim_start().starts_with("20"),
            "no timestamp: {line}"
        );
    }
    assert!(text.contains("<6>INFO "), "{text}");

    // JOURNAL_STREAM inherited, but stderr is another file: plain lines
    // with timestamps (stderr is not a terminal here either).
    let err = a.path("redirected.log");
    let mut child = spawn(&a.config, &err, &[("JOURNAL_STREAM", "1:1".into())]);
    wait_ready(&a, &mut child, &err);
    stop(&mut child);
    let text = daemon::read_to_string(&err);
    for line in text.lines() {
        assert!(
            line.starts_with("20") && line.as_bytes()[10] == b'T',
            "a timestamp: {line}"
        );
    }
}

#[test]
fn a_fatal_error_is_printed_once() {
    let a = Agent::new("");
    let err = a.path("first.log");
    let mut first = spawn(&a.config, &err, &[]);
    wait_ready(&a, &mut first, &err);
    // A second agent on the same data_dir (its own API port) cannot take
    // the log's lock: a fatal error.
    let second = a.path("second.toml");
    let text = daemon::read_to_string(&a.config).replace(
        &a.api.to_string(),
        &format!("127.0.0.1:{}", daemon::free_port()),
    );
    std::fs::write(&second, text).unwrap();
    let err2 = a.path("second.log");
    let out = spawn(&second, &err2, &[]).wait().unwrap();
    assert_eq!(out.code(), Some(1));
    let text = daemon::read_to_string(&err2);
    assert_eq!(
        text.matches("is locked by another process").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("error: ").count(), 1, "{text}");

    // Under the journal: one entry, at the error priority.
    std::fs::File::create(&err2).unwrap();
    let journal = dev_ino(&err2);
    let out = spawn(&second, &err2, &[("JOURNAL_STREAM", journal)])
        .wait()
        .unwrap();
    assert_eq!(out.code(), Some(1));
    let text = daemon::read_to_string(&err2);
    let fatal: Vec<&str> = text.lines().filter(|l| l.contains("locked")).collect();
    assert_eq!(fatal.len(), 1, "{text}");
    assert!(fatal[0].starts_with("<3>error: "), "{text}");
    stop(&mut first);
}

#[test]
fn a_dead_receivers_warnings_are_rate_limited() {
    let a = Agent::new("");
    let app = a.path("app.log");
    let dead = format!("127.0.0.1:{}", daemon::free_port());
    // The window is shortened (a minute by default) to keep the test short.
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\nendpoints = [\"http://{dead}\"]\n\
         backoff_initial = \"10ms\"\nbackoff_max = \"20ms\"\n",
        app.display()
    );
    let text = daemon::read_to_string(&a.config) + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(&app, "one line\n").unwrap();
    let err = a.path("stderr.log");
    let mut child = spawn(
        &a.config,
        &err,
        &[("HOLDFAST_LOG_REPEAT_WINDOW", "8s".into())],
    );
    wait_ready(&a, &mut child, &err);
    let line = wait_for(
        "a count line for the repeated warning",
        Duration::from_secs(60),
        || {
            daemon::read_to_string(&err)
                .lines()
                .find(|l| l.contains("more in the last 8s"))
                .map(str::to_string)
        },
    );
    assert!(line.contains(" WARN "), "{line}");
    // The sink retries about once a second: 8 s hold more than the burst.
    let text = daemon::read_to_string(&err);
    let before = text.split(line.as_str()).next().unwrap();
    let passed = before
        .lines()
        .filter(|l| l.contains("request failed; sending again"))
        .count();
    assert_eq!(passed, 5, "the first 5 pass:\n{text}");
    stop(&mut child);
}
