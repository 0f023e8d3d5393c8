//! The `journald` source end to end: real journal files written by
//! systemd's own `systemd-journal-remote` (export format in, journal files
//! out), read by the real binary through libsystemd's sd-journal, checked
//! with `holdfast dump`.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use daemon::{holdfast, http_get, wait_for, Agent};
use receivers::{Api, Receiver};
use serde_json::Value;

const JOURNAL_REMOTE: &str = "/lib/systemd/systemd-journal-remote";
const BOOT: &str = "0123456789abcdef0123456789abcdef";

/// One journal entry's fields; `n` makes its time and monotonic clock.
fn entry(n: u64, unit: &str, priority: u8, message: &[u8]) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "__REALTIME_TIMESTAMP".into(),
            (1_700_000_000_000_000 + n).to_string().into_bytes(),
        ),
        (
            "__MONOTONIC_TIMESTAMP".into(),
            (1000 + n).to_string().into_bytes(),
        ),
        ("_BOOT_ID".into(), BOOT.into()),
        ("_HOSTNAME".into(), b"box1".to_vec()),
        ("_SYSTEMD_UNIT".into(), unit.as_bytes().to_vec()),
        ("SYSLOG_IDENTIFIER".into(), b"app".to_vec()),
        ("_PID".into(), b"42".to_vec()),
        ("PRIORITY".into(), priority.to_string().into_bytes()),
        ("MESSAGE".into(), message.to_vec()),
    ]
}

fn text(n: u64) -> Vec<(String, Vec<u8>)> {
    entry(n, "app.service", 6, format!("entry {n}").as_bytes())
}

/// Writes `fields` as one entry in journal export format (text where the
/// value allows it, binary otherwise), what systemd-journal-remote reads.
fn write_entry(out: &mut Vec<u8>, fields: &[(&str, &[u8])]) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_bytes());
        if value.contains(&b'\n') || std::str::from_utf8(value).is_err() {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Appends `entries` to the journal file `file` (created if new).
fn write_journal(file: &Path, entries: &[Vec<(String, Vec<u8>)>]) {
    let mut input = Vec::new();
    for e in entries {
        let fields: Vec<(&str, &[u8])> =
            e.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        write_entry(&mut input, &fields);
    }
    let mut child = Command::new(JOURNAL_REMOTE)
        .arg(format!("--output={}", file.display()))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running systemd-journal-remote (Debian: systemd-journal-remote)");
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "journal-remote: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn config(dir: &Path, extra: &str) -> String {
    format!(
        "[sources.journal]\ntype = \"journald\"\ndirectory = \"{}\"\nstart_at = \"beginning\"\n{extra}\n",
        dir.display()
    )
}

/// The journal events in the log.
fn events(a: &Agent) -> Vec<Value> {
    let out = holdfast(&["dump", "--config", a.config_arg(), "--source", "journal"]);
    assert!(
        out.status.success(),
        "dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn wait_events(a: &Agent, n: usize) -> Vec<Value> {
    wait_for(
        &format!("{n} journal events in the log"),
        Duration::from_secs(30),
        || Some(events(a)).filter(|e| e.len() >= n),
    )
}

fn body(e: &Value) -> String {
    let b = &e["record"]["body"];
    b["stringValue"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("bytes:{}", b["bytesValue"].as_str().unwrap_or("")))
}

fn attr<'a>(e: &'a Value, key: &str) -> Option<&'a Value> {
    e["record"]["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// Every event's id once; and the bodies in log order.
fn bodies_once(events: &[Value]) -> Vec<String> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for e in events {
        *ids.entry(e["id"].as_str().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ids appended twice: {twice:?}");
    events.iter().map(body).collect()
}

fn journal_dir(a: &Agent) -> PathBuf {
    let d = a.path("journal");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An agent whose config has a journald source reading the directory
/// returned, with `extra` lines in its table.
fn journal_agent(extra: &str) -> (Agent, PathBuf) {
    let a = Agent::new("");
    let dir = journal_dir(&a);
    std::fs::write(
        &a.config,
        std::fs::read_to_string(&a.config).unwrap() + &config(&dir, extra),
    )
    .unwrap();
    (a, dir)
}

#[test]
fn reads_appends_rotation_binary_and_large_entries_once_across_restarts() {
    let (mut a, dir) = journal_agent("");
    let big = vec![b'x'; 1 << 20];
    write_journal(
        &dir.join("a.journal"),
        &[
            text(1),
            entry(2, "app.service", 3, b"bin\x00\xff\nary"),
            entry(3, "app.service", 6, &big),
        ],
    );
    a.start();
    a.wait_ready();
    let got = wait_events(&a, 3);
    let e = &got[0];
    assert_eq!(body(e), "entry 1");
    assert_eq!(e["record"]["severityText"], "info");
    assert_eq!(e["record"]["severityNumber"], 9);
    assert_eq!(e["record"]["timeUnixNano"], "1700000000000001000");
    assert_eq!(e["resource"]["attributes"][0]["key"], "host.name");
    assert_eq!(
        e["resource"]["attributes"][0]["value"]["stringValue"],
        "box1"
    );
    assert_eq!(
        attr(e, "_SYSTEMD_UNIT").unwrap()["stringValue"],
        "app.service"
    );
    assert_eq!(attr(e, "SYSLOG_IDENTIFIER").unwrap()["stringValue"], "app");
    assert_eq!(attr(e, "_PID").unwrap()["intValue"], "42");
    assert_eq!(attr(e, "_BOOT_ID").unwrap()["stringValue"], BOOT);
    assert!(
        got[1]["record"]["body"]["bytesValue"].is_string(),
        "{}",
        got[1]
    );
    assert_eq!(got[1]["record"]["severityText"], "err");
    assert_eq!(body(&got[2]).len(), 1 << 20);
    assert!(attr(&got[2], "log.record.truncated").is_none());

    // Appended while running, then a new file (a rotation).
    write_journal(&dir.join("a.journal"), &[text(4), text(5)]);
    wait_events(&a, 5);
    write_journal(&dir.join("b.journal"), &[text(6)]);
    wait_events(&a, 6);
    assert_eq!(a.stop().code(), Some(0));

    // Written while stopped, in both files; nothing read twice.
    write_journal(&dir.join("b.journal"), &[text(7)]);
    write_journal(&dir.join("c.journal"), &[text(8)]);
    a.start();
    a.wait_ready();
    let got = wait_events(&a, 8);
    let bodies = bodies_once(&got);
    assert_eq!(bodies.len(), 8, "{bodies:?}");
    for n in [1, 4, 5, 6, 7, 8] {
        assert!(bodies.contains(&format!("entry {n}")), "{bodies:?}");
    }
    assert_eq!(
        a.metric("holdfast_source_events_total{source=\"journal\"}"),
        Some(2.0)
    );
    a.stop();
}

#[test]
fn unit_priority_and_exclude_filters() {
    let extra = "units = [\"app.service\", \"db.service\"]\nexclude_units = [\"db.service\"]\nmin_priority = \"warning\"\nmax_entry_bytes = \"1KiB\"";
    let (mut a, dir) = journal_agent(extra);
    write_journal(
        &dir.join("a.journal"),
        &[
            entry(1, "app.service", 6, b"app info"),
            entry(2, "app.service", 4, b"app warning"),
            entry(3, "other.service", 2, b"other crit"),
            entry(4, "db.service", 3, b"db err"),
            entry(5, "app.service", 0, &[b'y'; 5000]),
            entry(6, "app.service", 3, b"app err"),
        ],
    );
    a.start();
    a.wait_ready();
    let got = wait_events(&a, 3);
    let bodies = bodies_once(&got);
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert_eq!(bodies[0], "app warning");
    assert!(
        bodies[1].starts_with("yyy") && bodies[1].len() < 1024,
        "{}",
        bodies[1].len()
    );
    assert_eq!(
        attr(&got[1], "log.record.truncated").unwrap()["boolValue"],
        true
    );
    assert_eq!(got[1]["record"]["severityText"], "emerg");
    assert_eq!(bodies[2], "app err");
    a.stop();
}

#[test]
fn a_vacuumed_checkpoint_resumes_at_the_oldest_entry_and_logs_the_gap() {
    let (mut a, dir) = journal_agent("");
    write_journal(&dir.join("a.journal"), &[text(1), text(2)]);
    a.start();
    a.wait_ready();
    wait_events(&a, 2);
    assert_eq!(a.stop().code(), Some(0));
    // While stopped: newer entries in a new file, the old one vacuumed.
    write_journal(&dir.join("b.journal"), &[text(3), text(4)]);
    std::fs::remove_file(dir.join("a.journal")).unwrap();
    a.start();
    a.wait_ready();
    let bodies = bodies_once(&wait_events(&a, 4));
    assert_eq!(bodies, ["entry 1", "entry 2", "entry 3", "entry 4"]);
    assert!(
        a.stderr().contains("checkpointed journal entry is gone"),
        "{}",
        a.stderr()
    );
    assert!(a
        .metric("holdfast_dropped_events_total{source=\"journal\",reason=\"journal_vacuumed\"}")
        .is_some());
    a.stop();
}

#[test]
fn an_unreadable_journal_keeps_the_agent_running_and_readyz_names_it() {
    let mut a = Agent::new("");
    let dir = a.path("not-yet");
    std::fs::write(
        &a.config,
        std::fs::read_to_string(&a.config).unwrap() + &config(&dir, ""),
    )
    .unwrap();
    a.start();
    let api = a.api;
    let (_, body) = wait_for(
        "/readyz to name the journal",
        Duration::from_secs(20),
        || http_get(api, "/readyz").filter(|(s, b)| *s == 503 && b.contains("journal")),
    );
    assert!(body.contains("not readable"), "{body}");
    assert!(
        a.stderr().contains("the journal is not readable"),
        "{}",
        a.stderr()
    );
    // Once there is a journal, the restarted source reads it.
    std::fs::create_dir_all(&dir).unwrap();
    write_journal(&dir.join("a.journal"), &[text(1)]);
    wait_events(&a, 1);
    wait_for("/readyz 200", Duration::from_secs(20), || {
        http_get(api, "/readyz").filter(|(s, _)| *s == 200)
    });
    a.stop();
}

/// kill -9 while entries are written and appended: after each restart the
/// source resumes from its checkpoint and the log, and in the end every
/// entry is in the log exactly once.
#[test]
fn kill9_at_random_moments_appends_every_entry_exactly_once() {
    let (mut a, dir) = journal_agent("");
    let rounds: u64 = 6;
    let per_round: u64 = 150;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for round in 0..rounds {
        let before = if round == 0 { 0 } else { events(&a).len() };
        a.start();
        // Entries arrive in small writes while the agent reads; it is
        // killed once a random share of them has reached the log.
        let file = dir.join(format!("j{}.journal", round % 3));
        let first = round * per_round;
        let want = next(per_round * 3 / 4) as usize;
        for chunk in (first..first + per_round).collect::<Vec<_>>().chunks(25) {
            let entries: Vec<_> = chunk.iter().map(|&n| text(n)).collect();
            write_journal(&file, &entries);
        }
        wait_events(&a, before + want);
        a.kill9();
    }
    a.start();
    a.wait_ready();
    let total = (rounds * per_round) as usize;
    let bodies = bodies_once(&wait_events(&a, total));
    assert_eq!(bodies.len(), total);
    let mut seen: Vec<u64> = bodies
        .iter()
        .map(|b| b.strip_prefix("entry ").unwrap().parse().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..rounds * per_round).collect::<Vec<_>>());
    a.stop();
}

/// Under `when_full = "block"` a full log pauses reading (the reader thread
/// blocks on its channel) and nothing is lost: once the sink drains the log, every
/// entry arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_pauses_reading_and_loses_nothing() {
    const N: u64 = 400;
    let es = Receiver::start(Api::Elasticsearch).await;
    es.refuse();
    let mut a = Agent::new(&format!(
        "[log]\nsegment_size = \"64KiB\"\nmax_bytes = \"256KiB\"\nwhen_full = \"block\"\n\
         compression = \"none\"\nappend_timeout = \"200ms\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"journal\"]\nendpoints = [\"http://{}\"]\n\
         batch_timeout = \"50ms\"\n",
        es.addr
    ));
    let dir = journal_dir(&a);
    std::fs::write(
        &a.config,
        std::fs::read_to_string(&a.config).unwrap() + &config(&dir, "max_entry_bytes = \"16KiB\""),
    )
    .unwrap();
    let pad = "p".repeat(2000);
    let entries: Vec<_> = (0..N)
        .map(|n| entry(n, "app.service", 6, format!("entry {n} {pad}").as_bytes()))
        .collect();
    write_journal(&dir.join("a.journal"), &entries);
    a.start();
    a.wait_ready();
    wait_for("reading to pause", Duration::from_secs(30), || {
        a.stderr().contains("journal reading paused").then_some(())
    });
    let held = events(&a).len() as u64;
    assert!(held < N, "the whole journal fit in the log: {held}");
    es.accept().await;
    wait_for("every entry delivered", Duration::from_secs(60), || {
        (es.state().arrivals.len() as u64 == N).then_some(())
    });
    let dropped = a.metrics();
    assert!(
        !dropped
            .lines()
            .any(|l| l.starts_with("holdfast_log_evicted") && !l.ends_with(" 0")),
        "{dropped}"
    );
    a.stop();
}

/// `start_at = "end"` skips the journal's history, but remembers where the
/// end was at once: entries written while the agent is stopped after its
/// first start are read.
#[test]
fn start_at_end_skips_history_but_not_what_is_written_while_stopped() {
    let mut a = Agent::new("");
    let dir = journal_dir(&a);
    let table = format!(
        "[sources.journal]\ntype = \"journald\"\ndirectory = \"{}\"\n",
        dir.display()
    );
    std::fs::write(
        &a.config,
        std::fs::read_to_string(&a.config).unwrap() + &table,
    )
    .unwrap();
    write_journal(&dir.join("a.journal"), &[text(1), text(2)]);
    a.start();
    a.wait_ready();
    let ck = a.data_dir().join("checkpoints/journal/journald.json");
    wait_for("the first checkpoint", Duration::from_secs(20), || {
        ck.exists().then_some(())
    });
    assert_eq!(a.stop().code(), Some(0));
    write_journal(&dir.join("a.journal"), &[text(3)]);
    a.start();
    a.wait_ready();
    assert_eq!(bodies_once(&wait_events(&a, 1)), ["entry 3"]);
    write_journal(&dir.join("a.journal"), &[text(4)]);
    assert_eq!(bodies_once(&wait_events(&a, 2)), ["entry 3", "entry 4"]);
    a.stop();
}

/// `e` with field `name` set to `value` (replaced or added).
fn with(mut e: Vec<(String, Vec<u8>)>, name: &str, value: &str) -> Vec<(String, Vec<u8>)> {
    match e.iter_mut().find(|(n, _)| n == name) {
        Some(f) => f.1 = value.as_bytes().to_vec(),
        None => e.push((name.to_string(), value.as_bytes().to_vec())),
    }
    e
}

/// `units` selects a unit's own entries and what systemd (PID 1) says
/// about it (`UNIT=`), as `journalctl --unit` does; `matches` with `+`
/// selects either side.
#[test]
fn unit_filter_includes_systemd_messages_about_the_unit_and_matches_alternatives() {
    let extra = "units = [\"app.service\"]\n\
                 matches = [\"SYSLOG_IDENTIFIER=app\", \"+\", \"SYSLOG_IDENTIFIER=systemd\"]";
    let (mut a, dir) = journal_agent(extra);
    let from_pid1 = |n, pid: &str, msg: &[u8]| {
        let e = entry(n, "init.scope", 6, msg);
        with(
            with(with(e, "_PID", pid), "SYSLOG_IDENTIFIER", "systemd"),
            "UNIT",
            "app.service",
        )
    };
    write_journal(
        &dir.join("a.journal"),
        &[
            entry(1, "app.service", 6, b"app own"),
            entry(2, "other.service", 6, b"other own"),
            from_pid1(3, "1", b"Started app.service"),
            from_pid1(4, "55", b"not from systemd"),
            with(
                entry(5, "app.service", 6, b"app, other ident"),
                "SYSLOG_IDENTIFIER",
                "x",
            ),
            entry(6, "app.service", 6, b"app last"),
        ],
    );
    a.start();
    a.wait_ready();
    let bodies = bodies_once(&wait_events(&a, 3));
    assert_eq!(bodies, ["app own", "Started app.service", "app last"]);
    a.stop();
}

/// A journal file rotated as journald rotates (the active file renamed to
/// `system@….journal`, a new `system.journal` started), while the agent
/// runs and while it is stopped: every entry is read once.
#[test]
fn rotation_while_running_and_while_stopped_reads_every_entry_once() {
    let (mut a, dir) = journal_agent("");
    let active = dir.join("system.journal");
    let rotate = |n: u32| {
        let archived =
            format!("system@0123456789abcdef0123456789abcdef-{n:016x}-0005f0000000000.journal");
        std::fs::rename(&active, dir.join(archived)).unwrap();
    };
    write_journal(&active, &[text(1), text(2)]);
    a.start();
    a.wait_ready();
    wait_events(&a, 2);
    rotate(1);
    write_journal(&active, &[text(3)]);
    wait_events(&a, 3);
    assert_eq!(a.stop().code(), Some(0));
    write_journal(&active, &[text(4)]);
    rotate(2);
    write_journal(&active, &[text(5), text(6)]);
    a.start();
    a.wait_ready();
    let bodies = bodies_once(&wait_events(&a, 6));
    assert_eq!(
        bodies,
        ["entry 1", "entry 2", "entry 3", "entry 4", "entry 5", "entry 6"]
    );
    a.stop();
}

/// `current_boot_only` reads the entries of the boot holdfast runs in and
/// none of the others in the same journal.
#[test]
fn current_boot_only_reads_this_boot_alone() {
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("reading this boot's id")
        .trim()
        .replace('-', "");
    assert_ne!(this_boot, BOOT);
    let (mut a, dir) = journal_agent("current_boot_only = true");
    let now = |n: u64, msg: &str| {
        with(
            entry(n, "app.service", 6, msg.as_bytes()),
            "_BOOT_ID",
            &this_boot,
        )
    };
    write_journal(
        &dir.join("a.journal"),
        &[
            entry(1, "app.service", 6, b"an earlier boot"),
            now(2, "this boot, first"),
            entry(3, "app.service", 6, b"an earlier boot again"),
            now(4, "this boot, second"),
        ],
    );
    a.start();
    a.wait_ready();
    let got = wait_events(&a, 2);
    assert_eq!(bodies_once(&got), ["this boot, first", "this boot, second"]);
    // Nothing else arrives: a marker of this boot written later comes next.
    write_journal(
        &dir.join("b.journal"),
        &[
            entry(5, "app.service", 6, b"an earlier boot, later"),
            now(6, "marker"),
        ],
    );
    let got = wait_events(&a, 3);
    assert_eq!(
        bodies_once(&got),
        ["this boot, first", "this boot, second", "marker"]
    );
    a.stop();
}
