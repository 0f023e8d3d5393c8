//! Upgrade with a backlog (issue 12, part 4): a data directory written by
//! the log format of version 1, holding events no sink has finished, must
//! open under a newer holdfast and deliver every one of them exactly as
//! version 1 did, then go on with new events — also across a kill -9 during
//! the first new appends.
//!
//! The data directory is `tests/fixtures/log-v1/`, written once by the real
//! binary of the last version-1 code with [`write_v1_fixture`] (ignored; run
//! it with `HOLDFAST_WRITE_V1_FIXTURE=1 cargo test --test upgrade_v1 --
//! --ignored`), together with what that code printed and sent for it:
//! `expected-dump.jsonl` (`holdfast dump`), `expected-inspect.json` and
//! `expected-<sink>.ndjson` (for the `elasticsearch` sinks each `_bulk`
//! action and document as sent; for the `otlp_http` sink each record with
//! its resource and scope). Its `README.md` says how it was made. The tests
//! copy it and never write into it.
//!
//! * `a_v1_backlog_is_delivered_exactly_then_new_events_follow`: `inspect`
//!   and `dump` show the directory as v1 did; each sink sends the events
//!   past its own cursor, once and exactly as v1 sent them; then new lines
//!   of the same file (the checkpoint's position) and an OTLP request.
//! * `a_kill_9_during_the_first_new_appends_loses_nothing`: kill -9 while
//!   the backlog is still being delivered and new lines and requests are
//!   appended; after the restart every new line is in the log once, every
//!   acknowledged record is there, and everything in the log arrives, the
//!   v1 events still exact (repeats only of what was in flight at the kill).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use holdfast::sources::file::checkpoint;
use receivers::{Api, Receiver};

/// The sink that had delivered the first part of the backlog.
const SEARCH: &str = "search";
/// The sink whose receiver was down all along: nothing of it is finished.
const BACKUP: &str = "backup";
/// The `otlp_http` sink, which had delivered more than `search`.
const COLLECTOR: &str = "collector";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log-v1")
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Where the agent's inputs and receivers are, for one run.
struct Ends {
    /// The tailed file.
    app_log: PathBuf,
    otlp: SocketAddr,
    search: SocketAddr,
    backup: SocketAddr,
    collector: SocketAddr,
}

/// The config after `data_dir`, `[api]` and `[daemon]` (which the harness
/// writes): the one the fixture was written with, `sink_extra` added to
/// every sink. Version 1 sent full documents, so the `elasticsearch` sinks
/// ask for that shape (`document = "full"`, as an operator upgrading with
/// index templates that read it would). Small segments, so a few hundred
/// events span several; the `backup` sink reads only the OTLP source, so
/// its cursor also passes events it does not send.
fn config(e: &Ends, sink_extra: &str) -> String {
    format!(
        "[log]\nsegment_size = \"64KiB\"\nmax_bytes = \"8MiB\"\ncursor_sync_interval = \"100ms\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{app}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"200ms\"\nmax_line_bytes = \"1KiB\"\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.{SEARCH}]\ntype = \"elasticsearch\"\ninputs = [\"app\", \"otlp\"]\n\
         endpoint = \"http://{search}\"\nbatch_timeout = \"50ms\"\nbackoff_max = \"1s\"\n\
         document = \"full\"\n{sink_extra}\n\n\
         [sinks.{BACKUP}]\ntype = \"elasticsearch\"\ninputs = [\"otlp\"]\n\
         endpoint = \"http://{backup}\"\nindex = \"backup-{{source}}-{{signal}}\"\n\
         batch_timeout = \"50ms\"\nbackoff_max = \"1s\"\ndocument = \"full\"\n{sink_extra}\n\n\
         [sinks.{COLLECTOR}]\ntype = \"otlp_http\"\ninputs = [\"app\", \"otlp\"]\n\
         endpoint = \"http://{collector}\"\nbatch_timeout = \"50ms\"\nbackoff_max = \"1s\"\n{sink_extra}\n",
        app = e.app_log.display(),
        otlp = e.otlp,
        search = e.search,
        backup = e.backup,
        collector = e.collector,
    )
}

fn free_addr() -> SocketAddr {
    format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap()
}

/// POSTs `body` to the OTLP listener; the status, or None if the
/// connection failed or closed without an answer (the agent was killed).
fn post(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1)?.parse().ok()
}

/// Posts a captured request of `tests/fixtures/otlp/` and asserts the 200.
fn post_capture(otlp: SocketAddr, name: &str) {
    let path = match name {
        n if n.contains("log") || n.contains("events") => "/v1/logs",
        n if n.contains("trace") => "/v1/traces",
        _ => "/v1/metrics",
    };
    let content_type = if name.ends_with(".json") {
        "application/json"
    } else {
        "application/x-protobuf"
    };
    let body = std::fs::read(repo_file("tests/fixtures/otlp").join(name)).unwrap();
    assert_eq!(
        post(otlp, path, content_type, &body),
        Some(200),
        "posting {name}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The fixture's file source checkpoint names the tailed file by path,
/// device, inode and birth time, which a copy cannot keep: point it at the
/// copy, as if the file had stayed where it was across the upgrade. Its key
/// (and so the ids of its lines) is the checkpoint's own.
fn relocate_checkpoint(data_dir: &Path, app_log: &Path) {
    let path = data_dir.join("checkpoints/app").join(checkpoint::FILE);
    let mut ck = checkpoint::decode(&std::fs::read(&path).unwrap(), "app").unwrap();
    let m = std::fs::metadata(app_log).unwrap();
    let btime = m
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64);
    assert_eq!(ck.records.len(), 1, "one tailed file: {ck:?}");
    for r in &mut ck.records {
        assert_eq!(r.detached_unix_ms, None, "{r:?}");
        r.path = app_log.display().to_string();
        r.dev = m.dev();
        r.ino = m.ino();
        r.btime = btime;
    }
    std::fs::write(&path, checkpoint::encode(&ck)).unwrap();
}

fn inspect_json(data_dir: &Path) -> serde_json::Value {
    let out = holdfast(&[
        "inspect",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn committed(v: &serde_json::Value, consumer: &str) -> u64 {
    v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == consumer)
        .and_then(|c| c["committed"].as_u64())
        .unwrap_or_else(|| panic!("no consumer {consumer}: {v}"))
}

fn dump(data_dir: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["dump", "--data-dir", data_dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = holdfast(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn source_events(a: &Agent, source: &str) -> u64 {
    a.metric(&format!(
        "holdfast_source_events_total{{source=\"{source}\"}}"
    ))
    .unwrap_or(0.0) as u64
}

// ---------------------------------------------------------------- the fixture

/// Loghub samples the tailed file is made of (CRLF ends, but Proxifier's LF).
const LOGHUB: [&str; 16] = [
    "Android",
    "Apache",
    "BGL",
    "HDFS",
    "HPC",
    "Hadoop",
    "HealthApp",
    "Linux",
    "Mac",
    "OpenSSH",
    "OpenStack",
    "Proxifier",
    "Spark",
    "Thunderbird",
    "Windows",
    "Zookeeper",
];
/// Lines of the tailed file before the `search` sink's receiver goes down,
/// before the `collector`'s does, and in all (events: one each, but the
/// empty line).
const PHASE1_LINES: usize = 240;
const PHASE2_LINES: usize = 300;
const ALL_LINES: usize = 330;
/// Special lines, by their number.
const LONG_LINE: usize = 57;
const NOT_UTF8_LINE: usize = 123;
const EMPTY_LINE: usize = 181;

/// The lines of the tailed file, each with its line end, as found in Loghub
/// but for the special lines above.
fn fixture_lines() -> Vec<Vec<u8>> {
    let samples: Vec<Vec<Vec<u8>>> = LOGHUB
        .iter()
        .map(|n| {
            let bytes =
                std::fs::read(repo_file(&format!("tests/fixtures/loghub/{n}_2k.log"))).unwrap();
            bytes
                .split_inclusive(|&b| b == b'\n')
                .filter(|l| l.ends_with(b"\n"))
                .map(<[u8]>::to_vec)
                .collect()
        })
        .collect();
    (0..ALL_LINES)
        .map(|i| {
            let from = &samples[i % LOGHUB.len()];
            let line = from[(i / LOGHUB.len()) * 37 % from.len()].clone();
            match i {
                // Longer than `max_line_bytes` (1 KiB): one event, cut.
                LONG_LINE => {
                    let mut long = Vec::new();
                    for k in 0..24 {
                        let l = &samples[k % LOGHUB.len()][k];
                        long.extend_from_slice(l.trim_ascii_end());
                        long.extend_from_slice(b" | ");
                    }
                    long.extend_from_slice(b"\r\n");
                    long
                }
                // Latin-1 and a stray byte: replaced by U+FFFD, marked.
                NOT_UTF8_LINE => {
                    let mut l = line.trim_ascii_end().to_vec();
                    l.extend_from_slice(b" user=J\xf6rg \xff\xfe end\r\n");
                    l
                }
                EMPTY_LINE => b"\r\n".to_vec(),
                _ => line,
            }
        })
        .collect()
}

fn append(path: &Path, lines: &[Vec<u8>]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        f.write_all(l).unwrap();
    }
    f.sync_all().unwrap();
}

/// Writes `tests/fixtures/log-v1/` with the real binary of this code. Run
/// only on the commit whose log format the fixture is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the committed fixture; HOLDFAST_WRITE_V1_FIXTURE=1 cargo test --test upgrade_v1 -- --ignored"]
async fn write_v1_fixture() {
    if std::env::var("HOLDFAST_WRITE_V1_FIXTURE").as_deref() != Ok("1") {
        eprintln!("HOLDFAST_WRITE_V1_FIXTURE=1 is not set: not writing the fixture");
        return;
    }
    let lines = fixture_lines();
    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    let collector = Collector::start().await;
    // The backup sink's receiver is down from the start.
    backup.refuse();
    let mut a = Agent::new("");
    std::fs::create_dir_all(a.path("input")).unwrap();
    let ends = Ends {
        app_log: a.path("input/app.log"),
        otlp: free_addr(),
        search: search.addr,
        backup: backup.addr,
        collector: collector.addr,
    };
    let text = std::fs::read_to_string(&a.config).unwrap() + &config(&ends, "");
    std::fs::write(&a.config, text).unwrap();
    let file_events = |n: usize| lines[..n].iter().filter(|l| l.trim_ascii() != b"").count() as u64;
    let data = a.data_dir();
    let appended = |a: &Agent| source_events(a, "app") + source_events(a, "otlp");
    let committed_at = |sink: &str, n: u64| committed(&inspect_json(&data), sink) == n;

    // Phase 1: search and collector deliver all of it.
    a.start();
    a.wait_ready();
    post_capture(ends.otlp, "logs.pb");
    append(&ends.app_log, &lines[..PHASE1_LINES / 2]);
    post_capture(ends.otlp, "traces.json");
    append(&ends.app_log, &lines[PHASE1_LINES / 2..PHASE1_LINES]);
    post_capture(ends.otlp, "metrics.pb");
    wait_for("phase 1 lines appended", Duration::from_secs(30), || {
        (source_events(&a, "app") == file_events(PHASE1_LINES)).then_some(())
    });
    let phase1 = appended(&a);
    wait_for(
        "phase 1 delivered and committed",
        Duration::from_secs(30),
        || {
            (search.state().stored.len() as u64 == phase1
                && collector.records().len() as u64 == phase1
                && committed_at(SEARCH, phase1)
                && committed_at(COLLECTOR, phase1))
            .then_some(())
        },
    );
    search.refuse();

    // Phase 2: the collector delivers.
    post_capture(ends.otlp, "traces.pb");
    append(&ends.app_log, &lines[PHASE1_LINES..PHASE2_LINES]);
    wait_for("phase 2 lines appended", Duration::from_secs(30), || {
        (source_events(&a, "app") == file_events(PHASE2_LINES)).then_some(())
    });
    let phase2 = appended(&a);
    wait_for(
        "phase 2 delivered and committed",
        Duration::from_secs(30),
        || {
            (collector.records().len() as u64 == phase2 && committed_at(COLLECTOR, phase2))
                .then_some(())
        },
    );
    collector.refuse();

    // Phase 3: nobody delivers.
    append(&ends.app_log, &lines[PHASE2_LINES..]);
    for name in [
        "logs.json",
        "metrics.json",
        "examples/logs.json",
        "examples/events.json",
        "examples/trace.json",
        "examples/metrics.json",
    ] {
        post_capture(ends.otlp, name);
    }
    wait_for("all lines appended", Duration::from_secs(30), || {
        (source_events(&a, "app") == file_events(ALL_LINES)).then_some(())
    });
    let total = appended(&a);
    assert!(a.stop().success(), "{}", a.stderr());

    let v = inspect_json(&data);
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
    assert_eq!(v["next_seq"], total, "{v}");
    assert!(v["segments"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(committed(&v, SEARCH), phase1, "{v}");
    assert_eq!(committed(&v, COLLECTOR), phase2, "{v}");
    assert_eq!(committed(&v, BACKUP), 0, "{v}");
    assert!(
        !data
            .join("checkpoints/app")
            .join("checkpoint.recent")
            .exists(),
        "a clean stop leaves the durable checkpoint only"
    );

    // Replaces what the generator writes; keeps the README and the licence.
    let out = fixture_dir();
    for old in ["data", "input"] {
        let _ = std::fs::remove_dir_all(out.join(old));
    }
    copy_dir(&data, &out.join("data"));
    copy_dir(&a.path("input"), &out.join("input"));
    let generic = config(
        &Ends {
            app_log: "@INPUT@/app.log".into(),
            otlp: "127.0.0.1:4318".parse().unwrap(),
            search: "127.0.0.1:9200".parse().unwrap(),
            backup: "127.0.0.1:9201".parse().unwrap(),
            collector: "127.0.0.1:4319".parse().unwrap(),
        },
        "",
    );
    std::fs::write(out.join("holdfast.toml"), generic).unwrap();
    assert_segments_are_v1(&out.join("data"));
    let facts = serde_json::to_string_pretty(&inspect_facts(&out.join("data"))).unwrap() + "\n";
    std::fs::write(out.join("expected-inspect.json"), facts).unwrap();
    std::fs::write(
        out.join("expected-dump.jsonl"),
        dump(&out.join("data"), &[]),
    )
    .unwrap();

    // What this code sends for the backlog: a copy delivered to receivers
    // that are up, one request at a time, so it arrives in log order.
    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    let collector = Collector::start().await;
    let (mut b, _) = upgraded_agent(&search, &backup, &collector, "concurrency = 1\n");
    b.start();
    b.wait_ready();
    let expected_search = total - phase1;
    let expected_collector = total - phase2;
    let expected_backup = source_events_in_dump(&out.join("expected-dump.jsonl"), "otlp");
    wait_for("the backlog delivered", Duration::from_secs(30), || {
        (search.state().stored.len() as u64 == expected_search
            && backup.state().stored.len() as u64 == expected_backup
            && collector.records().len() as u64 == expected_collector)
            .then_some(())
    });
    assert!(b.stop().success(), "{}", b.stderr());
    assert_eq!(
        inspect_json(&b.data_dir())["next_seq"],
        total,
        "the relocated checkpoint makes the source continue, not read again"
    );
    let dumped: Vec<serde_json::Value> = std::fs::read_to_string(out.join("expected-dump.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (name, r) in [(SEARCH, &search), (BACKUP, &backup)] {
        let st = r.state();
        assert!(st.arrivals.values().all(|&n| n == 1), "{name}: a repeat");
        // Exactly the events past the sink's cursor that it reads, in log
        // order.
        let from = committed(&v, name);
        let want: Vec<&str> = dumped
            .iter()
            .filter(|e| e["seq"].as_u64().unwrap() >= from)
            .filter(|e| name == SEARCH || e["source"] == "otlp")
            .map(|e| e["id"].as_str().unwrap())
            .collect();
        let sent: Vec<String> = st
            .batches
            .iter()
            .flatten()
            .map(|id| {
                let doc = st.raw[id][0].split_once('\n').unwrap().1;
                let doc: serde_json::Value = serde_json::from_str(doc).unwrap();
                doc["event_id"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(sent, want, "{name}");
        let mut text = String::new();
        for id in st.batches.iter().flatten() {
            text += &st.raw[id][0];
            text.push('\n');
        }
        std::fs::write(out.join(format!("expected-{name}.ndjson")), text).unwrap();
    }
    let mut text = collector.records().join("\n");
    text.push('\n');
    std::fs::write(out.join(format!("expected-{COLLECTOR}.ndjson")), text).unwrap();
}

/// Events of `source` in a dump.
fn source_events_in_dump(path: &Path, source: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["source"].as_str() == Some(source)
        })
        .count() as u64
}

/// An agent on a copy of the fixture, its sinks sending to `search`,
/// `backup` and `collector`, its file source continuing in a copy of the
/// tailed file.
fn upgraded_agent(
    search: &Receiver,
    backup: &Receiver,
    collector: &Collector,
    sink_extra: &str,
) -> (Agent, Ends) {
    let a = Agent::new("");
    let ends = Ends {
        app_log: a.path("input/app.log"),
        otlp: free_addr(),
        search: search.addr,
        backup: backup.addr,
        collector: collector.addr,
    };
    let text = std::fs::read_to_string(&a.config).unwrap() + &config(&ends, sink_extra);
    std::fs::write(&a.config, text).unwrap();
    copy_dir(&fixture_dir().join("data"), &a.data_dir());
    copy_dir(&fixture_dir().join("input"), &a.path("input"));
    relocate_checkpoint(&a.data_dir(), &ends.app_log);
    (a, ends)
}

// ------------------------------------------------------------- the upgrade

/// `inspect --json` without what changes by itself (ages, the path).
fn inspect_facts(data_dir: &Path) -> serde_json::Value {
    let mut v = inspect_json(data_dir);
    let o = v.as_object_mut().unwrap();
    o.remove("log_dir");
    o.remove("oldest_event_age_seconds");
    for c in v["consumers"].as_array_mut().unwrap() {
        c.as_object_mut()
            .unwrap()
            .remove("oldest_unread_age_seconds");
    }
    v
}

/// What `inspect --json` said of the fixture when it was written.
fn fixture_inspect() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture_dir().join("expected-inspect.json")).unwrap())
        .unwrap()
}

fn fixture_next_seq() -> u64 {
    fixture_inspect()["next_seq"].as_u64().unwrap()
}

/// Every value of `want` is in `got` (which may have more: a later
/// version's `inspect` adds to what v1 showed, it does not change it).
fn assert_json_within(want: &serde_json::Value, got: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k} is missing: {got}"));
                assert_json_within(wv, gv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            assert_eq!(w.len(), g.len(), "{at}: {got}");
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                assert_json_within(wv, gv, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(want, got, "{at}"),
    }
}

/// The segment files' headers say format version 1 (magic `HFSG`, then the
/// version as a little-endian u16).
fn assert_segments_are_v1(data_dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(data_dir.join("log")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "seg") {
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..4], b"HFSG", "{}", path.display());
            assert_eq!(
                u16::from_le_bytes([bytes[4], bytes[5]]),
                1,
                "{}: not a version 1 segment",
                path.display()
            );
            n += 1;
        }
    }
    n
}

/// What today's code sent for the fixture's backlog: per sink, each event's
/// `_id` and its action and document lines, in log order.
fn expected_docs(sink: &str) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(fixture_dir().join(format!("expected-{sink}.ndjson"))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() % 2, 0, "action and document pairs");
    lines
        .chunks(2)
        .map(|p| {
            let action: serde_json::Value = serde_json::from_str(p[0]).unwrap();
            let id = action["create"]["_id"].as_str().unwrap().to_string();
            (id, format!("{}\n{}", p[0], p[1]))
        })
        .collect()
}

/// Holds every arrival at `r` of the fixture's events to the bytes today's
/// code sent; returns the ids of the other events that arrived.
fn assert_v1_exact(sink: &str, r: &Receiver, expected: &[(String, String)]) -> HashSet<String> {
    let st = r.state();
    for (id, want) in expected {
        let got = st
            .raw
            .get(id)
            .unwrap_or_else(|| panic!("{sink}: v1 event {id} never arrived"));
        for g in got {
            if g != want {
                let same_json = g
                    .lines()
                    .map(serde_json::from_str::<serde_json::Value>)
                    .collect::<Result<Vec<_>, _>>()
                    .ok()
                    == want
                        .lines()
                        .map(serde_json::from_str::<serde_json::Value>)
                        .collect::<Result<Vec<_>, _>>()
                        .ok();
                panic!(
                    "{sink}: v1 event {id} sent differently from v1 ({}):\n  v1:  {want}\n  now: {g}",
                    if same_json { "the same JSON, other bytes" } else { "other content" }
                );
            }
        }
    }
    let known: HashSet<&String> = expected.iter().map(|(id, _)| id).collect();
    st.raw
        .keys()
        .filter(|id| !known.contains(id))
        .cloned()
        .collect()
}

fn all_stored(r: &Receiver, ids: &[&String]) -> bool {
    let st = r.state();
    ids.iter().all(|id| st.stored.contains_key(*id))
}

/// Lines appended after the upgrade, numbered for the receiver's sake.
fn new_lines(from: usize, to: usize) -> Vec<Vec<u8>> {
    (from..to)
        .map(|i| {
            format!("upgrade line {i:04} sshd[2451]: Accepted publickey for edge from 10.0.0.{} port 22\r\n", i % 250)
                .into_bytes()
        })
        .collect()
}

/// An OTLP logs request of `n` records whose `test.id`s are `<tag>-<i>`.
fn otlp_logs(tag: &str, n: usize) -> (Vec<u8>, Vec<String>) {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use prost::Message;
    let s = |v: &str| {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        })
    };
    let ids: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let records = ids
        .iter()
        .enumerate()
        .map(|(i, id)| LogRecord {
            time_unix_nano: 1_796_000_000_000_000_000 + i as u64,
            severity_text: "INFO".into(),
            severity_number: 9,
            body: s(&format!("after the upgrade: record {id}")),
            attributes: vec![KeyValue {
                key: "test.id".into(),
                value: s(id),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    let body = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: s("upgrade-test"),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    (body, ids)
}

/// What today's code sent the `collector` sink for the backlog: each
/// record as [`otlp_records`] writes it, in the order received.
fn expected_records() -> Vec<String> {
    std::fs::read_to_string(fixture_dir().join(format!("expected-{COLLECTOR}.ndjson")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A record of an event appended after the upgrade: its line, or its
/// `test.id`.
fn new_record_label(record: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(record).unwrap();
    let r = &v["record"];
    if let Some(id) = r["attributes"].as_array().and_then(|a| {
        a.iter()
            .find(|kv| kv["key"] == "test.id")
            .and_then(|kv| kv["value"]["stringValue"].as_str())
    }) {
        return Some(id.to_string());
    }
    r["body"]["stringValue"]
        .as_str()
        .filter(|b| b.starts_with("upgrade line"))
        .map(str::to_string)
}

/// The collector's records: those of the fixture's events, sorted, and the
/// labels of the new ones.
fn collector_split(c: &Collector) -> (Vec<String>, Vec<String>) {
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for r in c.records() {
        match new_record_label(&r) {
            Some(l) => new.push(l),
            None => old.push(r),
        }
    }
    old.sort();
    new.sort();
    (old, new)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// `got` and `want` hold the same records, as many times each; else the
/// panic names those missing and those too many.
fn assert_same_records(got: &[String], want: &[String], what: &str) {
    let mut count: HashMap<&String, i64> = HashMap::new();
    for r in want {
        *count.entry(r).or_default() += 1;
    }
    for r in got {
        *count.entry(r).or_default() -= 1;
    }
    let missing: Vec<_> = count
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(r, _)| r)
        .collect();
    let extra: Vec<_> = count
        .iter()
        .filter(|(_, &n)| n < 0)
        .map(|(r, _)| r)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} records missing or changed:\n{missing:#?}\n{} records extra or changed:\n{extra:#?}",
        missing.len(),
        extra.len()
    );
}

/// After the upgrade: version-1 segments (those of the backlog not yet
/// deleted), then version-2 ones, never the other way round.
fn assert_mixed_formats(data_dir: &Path) {
    let v = inspect_json(data_dir);
    let formats: Vec<u64> = v["segment_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["format"].as_u64().unwrap())
        .collect();
    assert_eq!(
        formats.last(),
        Some(&2),
        "new appends go to a version-2 segment: {v}"
    );
    assert!(
        formats.windows(2).all(|w| w[0] <= w[1]) && formats.iter().all(|&f| f == 1 || f == 2),
        "version-1 segments, then version-2 ones: {formats:?}"
    );
}

/// What `inspect` and `dump` show of the fixture before anything runs.
fn assert_opens_as_written(data_dir: &Path) {
    let segments = assert_segments_are_v1(data_dir);
    let want = fixture_inspect();
    let v = inspect_facts(data_dir);
    assert_json_within(&want, &v, "inspect");
    // What the fixture is for: sealed segments and an active one, a sink
    // half way through the backlog and one that finished nothing.
    assert!(segments >= 3, "{v}");
    assert_eq!(v["segments"], segments, "{v}");
    let next = v["next_seq"].as_u64().unwrap();
    assert!((1..next).contains(&committed(&v, SEARCH)), "{v}");
    assert_eq!(committed(&v, BACKUP), 0, "{v}");
    let out = holdfast(&["inspect", "--data-dir", data_dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("segments       {segments} (")),
        "{text}"
    );
    let listed = inspect_json(data_dir);
    let formats: Vec<u64> = listed["segment_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["format"].as_u64().unwrap())
        .collect();
    assert_eq!(
        formats,
        vec![1; segments],
        "every fixture segment is format 1: {listed}"
    );
    assert!(text.contains("   v1   "), "{text}");

    let want = std::fs::read_to_string(fixture_dir().join("expected-dump.jsonl")).unwrap();
    let got = String::from_utf8(dump(data_dir, &[])).unwrap();
    for (n, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "dump line {n} differs from what v1 printed");
    }
    assert_eq!(got.lines().count(), want.lines().count(), "dump lines");
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_backlog_is_delivered_exactly_then_new_events_follow() {
    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    let collector = Collector::start().await;
    let (mut a, ends) = upgraded_agent(&search, &backup, &collector, "");
    assert_opens_as_written(&a.data_dir());
    let v1_search = expected_docs(SEARCH);
    let v1_backup = expected_docs(BACKUP);
    let v1_records = sorted(expected_records());

    a.start();
    a.wait_ready();
    wait_for("the v1 backlog delivered", Duration::from_secs(30), || {
        (all_stored(
            &search,
            &v1_search.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        ) && all_stored(
            &backup,
            &v1_backup.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        ) && collector.records().len() >= v1_records.len())
        .then_some(())
    });
    // The search and collector sinks had finished a first part: they get
    // only the rest.
    assert_eq!(assert_v1_exact(SEARCH, &search, &v1_search), HashSet::new());
    assert_eq!(assert_v1_exact(BACKUP, &backup, &v1_backup), HashSet::new());
    assert_same_records(
        &collector.records(),
        &v1_records,
        "collector: the backlog as v1 sent it",
    );

    // New events continue after the backlog: lines appended to the same
    // file, and an OTLP request.
    let v1_len = std::fs::metadata(&ends.app_log).unwrap().len();
    let lines = new_lines(0, 40);
    append(&ends.app_log, &lines);
    let (body, otlp_ids) = otlp_logs("new", 5);
    assert_eq!(
        post(ends.otlp, "/v1/logs", "application/x-protobuf", &body),
        Some(200)
    );
    let new_docs = |r: &Receiver| -> Vec<serde_json::Value> {
        let st = r.state();
        st.docs
            .values()
            .filter(|d| {
                d["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("upgrade line"))
                    || d["attributes"]["test.id"].is_string()
            })
            .cloned()
            .collect()
    };
    wait_for("the new events delivered", Duration::from_secs(30), || {
        (new_docs(&search).len() == lines.len() + otlp_ids.len()
            && new_docs(&backup).len() == otlp_ids.len()
            && collector_split(&collector).1.len() == lines.len() + otlp_ids.len())
        .then_some(())
    });
    assert!(a.stop().success(), "{}", a.stderr());
    let (old, new) = collector_split(&collector);
    assert_same_records(
        &old,
        &v1_records,
        "collector: the backlog once, as v1 sent it",
    );
    let mut want: Vec<String> = lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .chain(otlp_ids.iter().cloned())
        .collect();
    want.sort();
    assert_eq!(new, want, "{COLLECTOR}: the new events once each");

    let docs = new_docs(&search);
    let mut offsets: Vec<u64> = docs
        .iter()
        .filter_map(|d| d["log.file.offset"].as_u64())
        .collect();
    offsets.sort_unstable();
    assert_eq!(offsets.len(), lines.len());
    assert_eq!(
        offsets[0], v1_len,
        "the file source continues where v1 stopped reading"
    );
    let mut tids: Vec<&str> = docs
        .iter()
        .filter_map(|d| d["attributes"]["test.id"].as_str())
        .collect();
    tids.sort_unstable();
    assert_eq!(
        tids,
        otlp_ids.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for (name, r) in [(SEARCH, &search), (BACKUP, &backup)] {
        let st = r.state();
        let repeats: Vec<_> = st.arrivals.iter().filter(|(_, &n)| n > 1).collect();
        assert!(repeats.is_empty(), "{name}: sent twice: {repeats:?}");
    }
    // Nothing of v1 changed in the meantime.
    assert_v1_exact(SEARCH, &search, &v1_search);
    assert_v1_exact(BACKUP, &backup, &v1_backup);
}

/// Posts requests of 5 records to `otlp` until `stop`; the `test.id`s of
/// records answered 200, and of those sent without an answer (in flight
/// when the agent died: in the log or not).
fn keep_posting(
    otlp: SocketAddr,
    tag: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(Vec<String>, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut acked, mut unanswered) = (Vec::new(), Vec::new());
        let mut k = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let (body, ids) = otlp_logs(&format!("{tag}{k:04}"), 5);
            k += 1;
            match post(otlp, "/v1/logs", "application/x-protobuf", &body) {
                Some(200) => {
                    acked.extend(ids);
                    // Pacing, not synchronisation: a steady trickle of
                    // appends that the kill interrupts, not a flood.
                    std::thread::sleep(Duration::from_millis(10));
                }
                Some(s) => panic!("a request answered {s}"),
                None => {
                    unanswered.extend(ids);
                    // The agent is gone: this was the request in flight.
                    break;
                }
            }
        }
        (acked, unanswered)
    })
}

/// The events after the fixture's end now in the log (v2 later): id and
/// the line body or the OTLP record's `test.id`.
fn new_events_in_log(data_dir: &Path) -> Vec<(String, String)> {
    let from = fixture_next_seq().to_string();
    String::from_utf8(dump(data_dir, &["--from", &from]))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let r = &v["record"];
            let test_id = r["attributes"]
                .as_array()
                .and_then(|a| a.iter().find(|kv| kv["key"] == "test.id"));
            let what = test_id.map_or(&r["body"], |kv| &kv["value"])["stringValue"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (v["id"].as_str().unwrap().to_string(), what)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_during_the_first_new_appends_loses_nothing() {
    use receivers::Fault;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    let collector = Collector::start().await;
    // Slow answers to small requests: the backlog takes at least 10 s to
    // deliver (4 events per 400 ms), so the kill, once the first new events
    // are in the log, comes while it is still being delivered.
    for r in [&search, &backup] {
        r.script(std::iter::repeat_n(
            Fault::Slow(Duration::from_millis(400)),
            1000,
        ));
    }
    let (mut a, ends) = upgraded_agent(
        &search,
        &backup,
        &collector,
        "concurrency = 1\nbatch_max_events = 4\nbackoff_initial = \"50ms\"\n",
    );
    let v1_search = expected_docs(SEARCH);
    let v1_backup = expected_docs(BACKUP);
    let lines = new_lines(0, 200);

    a.start();
    a.wait_ready();
    let stop = Arc::new(AtomicBool::new(false));
    let poster = keep_posting(ends.otlp, "k", stop.clone());
    append(&ends.app_log, &lines[..100]);
    let data = a.data_dir();
    let v1_committed = committed(&fixture_inspect(), SEARCH);
    // The kill comes once new lines and records are in the log and the
    // search sink's cursor has moved into the backlog (on disk), so the
    // restart resumes in the middle of a v1 segment.
    wait_for(
        "new events in the log and the backlog part delivered",
        Duration::from_secs(20),
        || {
            let new = new_events_in_log(&data);
            (new.iter().any(|(_, w)| w.starts_with("upgrade line"))
                && new.iter().any(|(_, w)| w.starts_with('k'))
                && committed(&inspect_json(&data), SEARCH) > v1_committed)
                .then_some(())
        },
    );
    a.kill9();
    stop.store(true, Ordering::SeqCst);
    let (mut acked, unanswered) = poster.join().unwrap();
    let at_kill = search.state().stored.len();
    let in_log_at_kill = new_events_in_log(&data).len();
    println!(
        "killed with {at_kill} of {} backlog documents at {SEARCH}, {} of {} at {BACKUP}, \
         {in_log_at_kill} new events in the log, {} records acknowledged, {} unanswered",
        v1_search.len(),
        backup.state().stored.len(),
        v1_backup.len(),
        acked.len(),
        unanswered.len()
    );
    assert!(
        at_kill < v1_search.len(),
        "the kill came after the backlog was delivered ({at_kill} documents)"
    );
    // Receivers down for the restart: the log is checked before any sink
    // can pass (and delete) what it holds.
    for r in [&search, &backup] {
        r.settle().await;
        r.state().epoch = 1;
        r.state().faults.clear();
        r.refuse();
    }
    collector.refuse();

    append(&ends.app_log, &lines[100..]);
    a.start();
    a.wait_ready();
    let (body, ids) = otlp_logs("after", 5);
    assert_eq!(
        post(ends.otlp, "/v1/logs", "application/x-protobuf", &body),
        Some(200)
    );
    acked.extend(ids);
    let new = wait_for("every new line in the log", Duration::from_secs(20), || {
        let new = new_events_in_log(&data);
        let n = new
            .iter()
            .filter(|(_, w)| w.starts_with("upgrade line"))
            .count();
        (n >= lines.len()).then_some(new)
    });
    // The events after the fixture's end are in version-2 segments, the
    // fixture's own still in version-1 ones; `dump` printed both kinds
    // (the new ones just above, the old ones in `assert_opens_as_written`).
    assert_mixed_formats(&data);

    // A line appended durably is not appended again; an acknowledged
    // record is there (a request is appended whole or not at all).
    let mut times: HashMap<&str, usize> = HashMap::new();
    for (_, what) in &new {
        *times.entry(what).or_default() += 1;
    }
    for l in &lines {
        let body = String::from_utf8_lossy(l).trim_end().to_string();
        assert_eq!(
            times.get(body.as_str()),
            Some(&1),
            "line {body:?} in the log"
        );
    }
    for id in &acked {
        assert_eq!(times.get(id.as_str()), Some(&1), "acknowledged record {id}");
    }
    for id in &unanswered {
        assert!(times.get(id.as_str()).copied().unwrap_or(0) <= 1, "{id}");
    }

    // Receivers back: everything in the log arrives, the v1 events as v1
    // sent them.
    for r in [&search, &backup] {
        r.accept().await;
    }
    collector.accept().await;
    let v1_records = expected_records();
    let mut new_labels: Vec<String> = new.iter().map(|(_, w)| w.clone()).collect();
    new_labels.sort();
    new_labels.dedup();
    let new_ids: Vec<&String> = new.iter().map(|(id, _)| id).collect();
    let new_otlp: Vec<&String> = new
        .iter()
        .filter(|(_, w)| !w.starts_with("upgrade line"))
        .map(|(id, _)| id)
        .collect();
    let v1_search_ids: Vec<&String> = v1_search.iter().map(|(id, _)| id).collect();
    let v1_backup_ids: Vec<&String> = v1_backup.iter().map(|(id, _)| id).collect();
    wait_for("everything delivered", Duration::from_secs(30), || {
        (all_stored(&search, &v1_search_ids)
            && all_stored(&search, &new_ids)
            && all_stored(&backup, &v1_backup_ids)
            && all_stored(&backup, &new_otlp)
            && {
                let (old, mut new) = collector_split(&collector);
                new.dedup();
                v1_records.iter().all(|r| old.binary_search(r).is_ok()) && new == new_labels
            })
        .then_some(())
    });
    assert!(a.stop().success(), "{}", a.stderr());

    let (old, _) = collector_split(&collector);
    let known: HashSet<&String> = v1_records.iter().collect();
    for r in &old {
        assert!(
            known.contains(r),
            "{COLLECTOR}: neither a backlog record v1 sent it nor a new one: {r}"
        );
    }
    for (name, r, v1, new) in [
        (SEARCH, &search, &v1_search, &new_ids),
        (BACKUP, &backup, &v1_backup, &new_otlp),
    ] {
        let others = assert_v1_exact(name, r, v1);
        let want: HashSet<String> = new.iter().map(|s| s.to_string()).collect();
        assert_eq!(others, want, "{name}: ids other than the log's");
        // A repeat is explained by the kill: delivered before it, again after.
        let st = r.state();
        let repeats = st.arrivals.values().filter(|&&n| n > 1).count();
        println!(
            "{name}: {} ids stored, {repeats} arrived more than once",
            st.stored.len()
        );
        for (id, &n) in &st.arrivals {
            if n > 1 {
                let epochs = &st.delivered_epochs[id];
                assert!(
                    epochs.contains(&0) || st.explained.contains(id),
                    "{name}: {id} arrived {n} times, epochs {epochs:?}"
                );
            }
        }
    }
}

// ------------------------------------------------- the OTLP sink's requests

/// A request's path and its body, decompressed.
type Body = (String, Vec<u8>);

/// An OTLP/HTTP receiver that keeps every request body (decompressed) and
/// answers 200 with an empty `Export*ServiceResponse` (nothing rejected).
/// The shared test receiver identifies records by a `test.id` that the
/// fixture's captured spans and metrics do not carry; this one only keeps
/// the bytes.
struct Collector {
    addr: SocketAddr,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Body>>>,
    /// While set, requests (also on connections already open) are dropped
    /// unanswered and nothing is kept.
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = Collector {
            addr: listener.local_addr().unwrap(),
            bodies: Default::default(),
            down: Default::default(),
            task: Default::default(),
        };
        c.serve(listener);
        c
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        use http_body_util::BodyExt;
        let bodies = self.bodies.clone();
        let down = self.down.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let bodies = bodies.clone();
                let down = down.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let bodies = bodies.clone();
                            let down = down.clone();
                            async move {
                                if down.load(std::sync::atomic::Ordering::SeqCst) {
                                    return Err(std::io::Error::other("the receiver is down"));
                                }
                                let path = req.uri().path().to_string();
                                let gzip = req
                                    .headers()
                                    .get("content-encoding")
                                    .is_some_and(|v| v == "gzip");
                                let raw = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map_err(std::io::Error::other)?
                                    .to_bytes();
                                let mut body = Vec::new();
                                if gzip {
                                    flate2::read::GzDecoder::new(&raw[..])
                                        .read_to_end(&mut body)
                                        .unwrap();
                                } else {
                                    body = raw.to_vec();
                                }
                                bodies.lock().unwrap().push((path, body));
                                Ok::<_, std::io::Error>(
                                    hyper::Response::builder()
                                        .status(200)
                                        .header("content-type", "application/x-protobuf")
                                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Down: new connections refused, requests on open ones dropped.
    fn refuse(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }

    /// Up again on the same address.
    async fn accept(&self) {
        let listener = loop {
            // The aborted accept loop releases the socket when its task is
            // dropped, a moment after `abort`.
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        self.serve(listener);
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every record received, one JSON line each (see [`otlp_records`]).
    fn records(&self) -> Vec<String> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .flat_map(|(path, body)| otlp_records(path, body))
            .collect()
    }
}

/// The records of an OTLP request, each as one line of JSON holding its
/// signal, its resource and scope (with their schema URLs) and the record:
/// what the request says of each record, whatever the grouping (which
/// follows the batches, and they vary run to run).
fn otlp_records(path: &str, body: &[u8]) -> Vec<String> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    use serde_json::json;
    let mut out = Vec::new();
    let mut push = |signal: &str, r: serde_json::Value| {
        let mut r = r;
        r["signal"] = json!(signal);
        out.push(serde_json::to_string(&r).unwrap());
    };
    match path {
        "/v1/logs" => {
            for rl in ExportLogsServiceRequest::decode(body)
                .unwrap()
                .resource_logs
            {
                for sl in &rl.scope_logs {
                    for r in &sl.log_records {
                        push(
                            "logs",
                            json!({"resource": rl.resource, "resource_schema_url": rl.schema_url,
                            "scope": sl.scope, "scope_schema_url": sl.schema_url, "record": r}),
                        );
                    }
                }
            }
        }
        "/v1/traces" => {
            for rs in ExportTraceServiceRequest::decode(body)
                .unwrap()
                .resource_spans
            {
                for ss in &rs.scope_spans {
                    for r in &ss.spans {
                        push(
                            "traces",
                            json!({"resource": rs.resource, "resource_schema_url": rs.schema_url,
                            "scope": ss.scope, "scope_schema_url": ss.schema_url, "record": r}),
                        );
                    }
                }
            }
        }
        "/v1/metrics" => {
            for rm in ExportMetricsServiceRequest::decode(body)
                .unwrap()
                .resource_metrics
            {
                for sm in &rm.scope_metrics {
                    for r in &sm.metrics {
                        push(
                            "metrics",
                            json!({"resource": rm.resource, "resource_schema_url": rm.schema_url,
                            "scope": sm.scope, "scope_schema_url": sm.schema_url, "record": r}),
                        );
                    }
                }
            }
        }
        other => panic!("unexpected OTLP path {other}"),
    }
    out
}
