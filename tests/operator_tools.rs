//! What the operator's commands say when something is off (issue 27): a
//! refused reload in the journal, `forget` for a sink still configured,
//! `dump`/`inspect` pointed at no config or no log, the log line of a
//! quarantine. Each message names the
//! problem and what to do, and nothing is queued that would be refused.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::path::Path;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const PIPELINE: &str =
    "[sources.app]\ntype = \"file\"\ninclude = [\"/nonexistent-holdfast-test/*.log\"]\n\n\
     [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\n";

#[test]
fn a_refused_reload_logs_each_problem_as_an_entry_of_its_own() {
    let mut a = Agent::new(PIPELINE);
    a.start();
    a.wait_ready();
    let good = std::fs::read_to_string(&a.config).unwrap();
    // Two problems: an unknown key (in the last table, [sinks.archive])
    // and a sink reading a source that does not exist.
    std::fs::write(
        &a.config,
        good + "bogus = 1\n\n[sinks.extra]\ntype = \"file\"\ninputs = [\"nope\"]\n",
    )
    .unwrap();
    a.signal("HUP");
    wait_for(
        "the refused reload counted",
        Duration::from_secs(30),
        || {
            (a.metric("holdfast_config_reloads_total{result=\"failed\"}") >= Some(1.0))
                .then_some(())
        },
    );
    let log = a.stderr();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reload refused"))
        .collect();
    assert_eq!(
        refused.len(),
        3,
        "a summary and one entry per problem:\n{log}"
    );
    assert!(refused[0].contains("2 problem(s)"), "{log}");
    assert!(
        refused.iter().any(|l| l.contains("sinks.archive.bogus")),
        "{log}"
    );
    assert!(
        refused
            .iter()
            .any(|l| l.contains("no source named \"nope\"")),
        "{log}"
    );
    // Every line of the log is an entry: a timestamp, then a level.
    for line in log.lines() {
        let mut words = line.split_whitespace();
        let stamp = words.next().unwrap_or_default();
        let level = words.next().unwrap_or_default();
        assert!(
            stamp.starts_with("20") && stamp.ends_with('Z'),
            "a line without a timestamp: {line:?}\n{log}"
        );
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG"].contains(&level),
            "a line without a level: {line:?}\n{log}"
        );
    }
    assert!(a.stop().success(), "{}", a.stderr());
}

#[test]
fn forget_refuses_a_sink_still_in_the_config_at_once() {
    let mut a = Agent::new(PIPELINE);
    // The log and the sink's cursor exist once the agent has run.
    a.start();
    a.wait_ready();
    assert!(a.stop().success(), "{}", a.stderr());

    let out = holdfast(&["forget", "--config", a.config_arg(), "--sink", "archive"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sink \"archive\" is still in the config"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("remove [sinks.archive]"),
        "{}",
        stderr(&out)
    );
    // Nothing was queued for the next reload to refuse.
    let queued: Vec<_> = walk(&a.data_dir())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("forget"))
        .collect();
    assert!(queued.is_empty(), "{queued:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn dump_and_inspect_say_which_flag_finds_the_log() {
    // A config that cannot be read is not "invalid".
    let out = holdfast(&["dump", "--config", "/nonexistent-holdfast-test.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !stderr(&out).contains("invalid configuration"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("cannot read the config file"),
        "{}",
        stderr(&out)
    );

    // No flag, and no default config on this machine: say which flags work.
    if !Path::new("/etc/holdfast/holdfast.toml").exists() {
        let out = holdfast(&["dump"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            !stderr(&out).contains("invalid configuration"),
            "{}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("give --config FILE (the agent's config) or --data-dir DIR"),
            "{}",
            stderr(&out)
        );
    }

    let out = holdfast(&["inspect", "--data-dir", "/nonexistent-holdfast-test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !stderr(&out).contains("entity not found"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(
            "there is no log in /nonexistent-holdfast-test/log: the directory does not exist"
        ),
        "{}",
        stderr(&out)
    );
}

/// The journal line of a quarantine gives the receiver's status as the
/// number it sent (`status=400`), not Rust's `Some(400)`, beside the
/// receiver's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_logs_the_receivers_status_as_a_number() {
    use receivers::{Api, Fault, Receiver};
    let es = Receiver::start(Api::Elasticsearch).await;
    es.script([Fault::status(400)]);
    let tmp = tempfile::tempdir().unwrap();
    let lines = tmp.path().join("app.log");
    std::fs::write(&lines, "one line the receiver refuses\n").unwrap();
    let mut a = Agent::new(&format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\nendpoints = [\"http://{}\"]\n\
         batch_timeout = \"50ms\"\n",
        lines.display(),
        es.addr
    ));
    a.start();
    a.wait_ready();
    wait_for("the event quarantined", Duration::from_secs(30), || {
        a.stderr()
            .lines()
            .find(|l| l.contains("quarantining events the receiver rejected for good"))
            .map(str::to_owned)
    });
    let log = a.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("quarantining events the receiver rejected for good"))
        .unwrap_or_default();
    assert!(line.contains("status=400"), "{line}");
    assert!(!line.contains("Some("), "{line}");
    assert!(a.stop().success(), "{log}");
}
